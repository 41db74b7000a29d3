"""The sandbox stops runaway programs and keeps them inside their throw-away directory."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from suites.sandbox import network_namespace_prefix, run_program, run_programs


def test_a_program_that_runs_to_its_end_passes_and_a_failing_assert_fails() -> None:
    assert run_program("def f(x):\n    return 2 * x\nassert f(2) == 4\n").passed
    failed = run_program("print('working')\nassert 1 == 2, 'one is not two'\n")
    assert failed.status == "failed" and "AssertionError: one is not two" in failed.detail
    assert "working" in failed.detail  # the program's own output is kept for diagnosis
    assert run_program("def broken(:\n").status == "failed"


def test_an_infinite_loop_is_stopped_by_the_timeout() -> None:
    start = time.perf_counter()
    result = run_program("while True:\n    pass\n", timeout_s=2.0)
    assert result.status == "timeout" and not result.passed
    assert time.perf_counter() - start < 30  # stopped, not left to run (generous: 2 shared cores)


def test_an_unbounded_allocation_is_stopped_by_the_memory_limit() -> None:
    one_shot = run_program("x = bytearray(64 * 2**30)\n", memory_mb=512)
    growing = run_program("chunks = []\nwhile True:\n    chunks.append(bytearray(2**24))\n", memory_mb=512)
    assert (one_shot.status, growing.status) == ("memory", "memory")


def test_writes_outside_the_working_directory_fail(tmp_path: Path) -> None:
    target = tmp_path / f"escaped-{uuid.uuid4().hex}.txt"
    for program in (
        f"open({str(target)!r}, 'w').write('x')\n",
        f"import os\nos.close(os.open({str(target)!r}, os.O_CREAT | os.O_WRONLY))\n",
        f"import pathlib\npathlib.Path({str(target)!r}).write_text('x')\n",
        f"import os\nos.symlink({str(target)!r}, 'link')\nopen('link', 'w').write('x')\n",
        "open('../escaped.txt', 'w').write('x')\n",
    ):
        result = run_program(program)
        assert result.status == "failed" and "sandbox:" in result.detail, program
    assert not target.exists()
    keep = tmp_path / "keep.txt"
    keep.write_text("keep")
    assert not run_program(f"import os\nos.remove({str(keep)!r})\n").passed
    assert keep.read_text() == "keep"


def test_writes_inside_the_working_directory_work() -> None:
    program = (
        "import os\nos.mkdir('d')\nopen('d/a.txt', 'w').write('hi')\nassert open('d/a.txt').read() == 'hi'\n"
    )
    assert run_program(program).passed


@pytest.mark.parametrize(
    "program",
    [
        "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)\n",
        "import subprocess\nsubprocess.run(['true'])\n",
        "import os\nos.system('true')\n",
        "import os\nos.fork()\n",
    ],
)
def test_network_and_new_processes_are_refused(program: str) -> None:
    result = run_program(program)
    assert result.status == "failed" and "not allowed" in result.detail


def test_exiting_early_is_not_a_pass() -> None:
    assert run_program("import sys\nsys.exit(0)\nassert False\n").status == "failed"
    assert run_program("import os\nos._exit(0)\nassert False\n").status == "failed"


def test_many_programs_keep_their_order() -> None:
    results = run_programs([f"assert {i} % 2 == 0\n" for i in range(6)], workers=2)
    assert [r.passed for r in results] == [True, False, True, False, True, False]


def test_network_namespace_probe_is_a_prefix_or_empty() -> None:
    prefix = network_namespace_prefix()
    assert prefix == () or prefix[1:] == ("-rn",)
