"""The sandbox: a hostile program can neither fake a pass nor leave anything behind.

Every hostile program below is paired with tests it does not satisfy (it defines no correct
``f``), so a "passed" could only come from fooling the verdict. After each run the fixture checks
that nothing is left: no sandbox folder, no child process, the files outside untouched.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from suites import sandbox
from suites._sandbox_wire import ProtocolError, decode
from suites.sandbox import ExecResult, network_namespace_prefix, run_program, run_programs

TESTS = "assert f(2) == 4\n"  # no hostile program below defines an f that passes this

# Write a forged verdict and a forged reply to every descriptor the program has, then "succeed".
_FORGE = (
    "import os\n"
    "for fd in range(3, 1024):\n"
    "    for forged in (b'{\"status\": \"passed\", \"detail\": \"\"}', b'[\"ok\", [\"b\", true]]\\n'):\n"
    "        try:\n"
    "            os.write(fd, forged)\n"
    "        except OSError:\n"
    "            pass\n"
)
_SECRETS = (  # print every string that could be a nonce or verdict token, then exit 0
    "import gc, os, sys\n"
    "found = set()\n"
    "frame = sys._getframe()\n"
    "while frame is not None:\n"
    "    found.update(v for v in frame.f_locals.values() if isinstance(v, str))\n"
    "    frame = frame.f_back\n"
    "found.update(o for o in gc.get_objects() if isinstance(o, str))\n"
    "print('\\n'.join(found), 'passed', flush=True)\n"
)
HOSTILE = {
    "secrets from frames and gc, then os._exit(0)": _SECRETS + "os._exit(0)\n",
    "secrets from frames and gc, then sys.exit(0)": _SECRETS + "sys.exit(0)\n",
    "forged verdict on every descriptor, then os._exit(0)": _FORGE + "os._exit(0)\n",
    "forged verdict on every descriptor, then serve as if finished": _FORGE + "def f(x):\n    return x\n",
    "descriptors through /proc/self/fd": (
        "import os\nfor n in os.listdir('/proc/self/fd'):\n"
        "    open('/proc/self/fd/' + n, 'wb').write(b'passed')\nos._exit(0)\n"
    ),
    "/proc/self/mem": "data = open('/proc/self/mem', 'rb')\nimport os\nos._exit(0)\n",
    "the judge's /proc entries": (
        "import os\nfor pid in os.listdir('/proc'):\n"
        "    if pid.isdigit() and b'_sandbox_judge' in open(f'/proc/{pid}/cmdline', 'rb').read():\n"
        "        os.write(os.open(f'/proc/{pid}/fd/1', os.O_WRONLY), b'passed')\n"
    ),
    "sys.exit(0) before the tests": "import sys\nsys.exit(0)\n",
    "os._exit(0) before the tests": "import os\nos._exit(0)\n",
    "patched AssertionError and builtins": (
        "import builtins\nclass Quiet(BaseException):\n    pass\n"
        "builtins.AssertionError = Quiet\nbuiltins.len = lambda x: 4\nbuiltins.__import__ = None\n"
        "def f(x):\n    return x\n"
    ),
    "an object equal to everything": (
        "class Anything:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
        "def f(x):\n    return Anything()\n"
    ),
    "a true-valued object": "class Yes:\n    def __bool__(self):\n        return True\ndef f(x):\n    return Yes()\n",
    "os.system": "import os\nos.system('true')\nos._exit(0)\n",
    "subprocess": "import subprocess\nsubprocess.run(['true'])\nimport os\nos._exit(0)\n",
    "os.fork": "import os\nif os.fork() == 0:\n    os._exit(0)\nos._exit(0)\n",
    "ctypes into libc": "import ctypes\nctypes.CDLL(None).exit(0)\n",
    "an infinite loop": "while True:\n    pass\n",
    "an infinite loop inside the tested function": "def f(x):\n    while True:\n        pass\n",
    "an 8 GiB allocation": "x = bytearray(8 * 2**30)\ndef f(x):\n    return 4\n",
    "an allocation inside the tested function": "def f(x):\n    return len(bytearray(8 * 2**30))\n",
}


def _children() -> set[int]:
    """Pids whose parent is this process (the sandbox's processes are)."""
    mine = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid():
                mine.add(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return mine


@pytest.fixture
def clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - yields a checker
    """Sandbox folders go to a private temp dir; ``check()`` asserts nothing was left behind."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    children_before = _children()

    def check() -> None:
        assert list(scratch.iterdir()) == [], "a sandbox folder was left behind"
        assert sorted(p.name for p in outside.iterdir()) == ["keep.txt"]
        assert (outside / "keep.txt").read_text() == "keep"
        assert _children() <= children_before, "a sandbox process was left running"

    check.outside = outside  # type: ignore[attr-defined]
    return check


def run_hostile(program: str, tests: str = TESTS, **limits: float) -> ExecResult:
    limits.setdefault("timeout_s", 10.0)
    limits.setdefault("memory_mb", 512)
    return run_program(program, tests, **limits)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_hostile_program_is_not_passed_and_leaves_nothing(name: str, clean) -> None:  # noqa: ANN001
    timeout = 2.0 if "infinite" in name else 10.0  # the loops are stopped by the clock: keep it short
    result = run_hostile(HOSTILE[name], timeout_s=timeout)
    assert not result.passed, (name, result)
    if "infinite" in name:
        assert result.status == "timeout"
    if "allocation" in name:
        assert result.status == "memory"
    clean()


@pytest.mark.parametrize(
    "program",
    [
        "open({target!r}, 'w').write('x')\n",
        "import os\nos.close(os.open({target!r}, os.O_CREAT | os.O_WRONLY))\n",
        "import pathlib\npathlib.Path({target!r}).write_text('x')\n",
        "import os\nos.symlink({target!r}, 'link')\nopen('link', 'w').write('x')\n",
        "import os\nos.remove({keep!r})\n",
        "import os\nos.rename({keep!r}, {target!r})\n",
        "import shutil\nshutil.rmtree({outside!r})\n",
        "open('../escaped.txt', 'w').write('x')\n",
    ],
)
def test_writing_deleting_or_renaming_outside_the_folder_is_refused(program: str, clean) -> None:  # noqa: ANN001
    outside = clean.outside
    source = program.format(target=str(outside / "new.txt"), keep=str(outside / "keep.txt"), outside=str(outside))
    result = run_hostile(source + "def f(x):\n    return 2 * x\n")
    assert result.status == "failed" and "sandbox:" in result.detail, result
    clean()


def test_a_connection_to_a_loopback_listener_never_arrives(clean) -> None:  # noqa: ANN001
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        program = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\ndef f(x):\n    return 4\n"
        result = run_hostile(program)
        with pytest.raises(TimeoutError):
            listener.accept()
    assert result.status == "failed" and "not allowed" in result.detail
    clean()


def test_signalling_the_parent_is_refused(clean) -> None:  # noqa: ANN001
    received: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: received.append(signum))
    try:
        program = "import os, signal\nos.kill(os.getppid(), signal.SIGUSR1)\ndef f(x):\n    return 4\n"
        result = run_hostile(program)
        time.sleep(0.1)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert received == [] and result.status == "failed" and "not allowed" in result.detail
    clean()


def test_honest_programs_pass_and_wrong_ones_fail_with_a_reason(clean) -> None:  # noqa: ANN001
    assert run_program("def f(x):\n    return 2 * x\n", TESTS).passed
    failed = run_program("print('working')\ndef f(x):\n    return x\n", "assert f(1) == 2, 'one is not two'\n")
    assert failed.status == "failed" and "AssertionError: one is not two" in failed.detail
    assert "working" in failed.detail  # the program's own output is kept for diagnosis
    assert run_program("def broken(:\n", TESTS).status == "failed"
    assert run_program("def f(x):\n    return 2 * x\nassert f(2) == 5\n", TESTS).status == "failed"
    clean()


def test_values_cross_as_plain_data_and_objects_as_stand_ins(clean) -> None:  # noqa: ANN001
    program = (
        "import math\nfrom collections import Counter, namedtuple\nPoint = namedtuple('Point', 'x y')\n"
        "class Node:\n    def __init__(self, v):\n        self.v, self.left = v, None\n"
        "def depth(n):\n    return 0 if n is None else 1 + depth(n.left)\n"
        "def kinds(xs, t):\n    return [x for x in xs if isinstance(x, t)]\n"
        "def gen(n):\n    yield from range(n)\n"
        "def stats(s, *, sep=','):\n    return Counter(s.split(sep)), Point(1, 2), {1.5, 2j}, b'ok'\n"
        "def boom():\n    raise ValueError('bad input')\n"
        "def missing():\n    return open('no-such-file')\n"  # an OSError of the program's: no broken channel
        "import re\ndef starts_with_a(s):\n    return re.match('a', s)\n"
    )
    tests = (
        "r = Node(1)\nr.left = Node(2)\nr.left.left = Node(3)\nassert depth(r) == 3 and r.left.v == 2\n"
        "assert kinds((1, 'a', 2.5), str) == ['a'] and list(gen(3)) == [0, 1, 2]\n"
        "assert stats('a;b;a', sep=';') == ({'a': 2, 'b': 1}, (1, 2), {1.5, 2j}, b'ok')\n"
        "assert math.pi > 3 and starts_with_a('abc') and not starts_with_a('cab')\n"  # the program's `import math` is visible, as in one file
        "try:\n    boom()\n    raise SystemExit('no error')\nexcept ValueError as err:\n"
        "    assert 'bad input' in str(err)\n"
        "try:\n    missing()\n    raise SystemExit('no error')\nexcept FileNotFoundError:\n    pass\n"
    )
    result = run_program(program, tests)
    assert result.passed, result
    clean()


@pytest.mark.parametrize(
    "wire", [["q"], ["i", "1"], ["b", 1], ["l", "x"], ["S", [["l", []]]], ["d", [[["l", []], ["n"]]]], ["h", "0", "x", None], ["h", 0, "x", 1], 5]
)
def test_malformed_wire_values_are_protocol_errors(wire: object) -> None:
    with pytest.raises(ProtocolError):
        decode(wire, lambda i, t, truth: (i, t), lambda name: name)


def test_run_programs_keeps_order_and_never_runs_more_sandboxes_than_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    results = run_programs([(f"x = {i}\n", "assert x % 2 == 0\n") for i in range(4)], workers=2)
    assert [r.passed for r in results] == [True, False, True, False]
    running, most, lock = 0, 0, threading.Lock()

    def fake_run(program: str, tests: str, **_: object) -> ExecResult:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.05)
        with lock:
            running -= 1
        return ExecResult("passed")

    monkeypatch.setattr(sandbox, "run_program", fake_run)
    monkeypatch.setattr(sandbox, "max_concurrency", lambda: 2)
    run_programs([("", "")] * 12, workers=16)
    assert most == 2


def test_running_without_a_network_namespace_is_said_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sandbox, "network_namespace_prefix", lambda: ())
    monkeypatch.setattr(sandbox, "_announced", False)
    sandbox.announce()
    sandbox.announce()
    assert capsys.readouterr().err.count("without a network namespace") == 1
    assert sandbox.isolation() == {"network_namespace": False, "note": sandbox.NO_NAMESPACE_NOTE}


def test_network_namespace_probe_is_a_prefix_or_empty() -> None:
    prefix = network_namespace_prefix()
    assert prefix == () or prefix[1:] == ("-rn",)
    assert sys.platform != "linux" or sandbox.max_concurrency() <= (os.cpu_count() or 1)
