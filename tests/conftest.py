"""Shared pytest fixtures."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.benchmark_data import DataFacts

# Idle OpenMP threads sleep instead of spinning: on 2 shared cores a spinning pool in one process
# (torch's default) starves every other (sandboxed programs, subprocess CLIs), slowing tests ~4x.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The Triton kernel tests run in Triton's interpreter on a CPU; the flag must be set before the first
# `import torch`, which loads Triton (tests/test_kernels.py; JFBENCH_TEST_DEVICE=cuda runs them compiled).
if os.environ.get("JFBENCH_TEST_DEVICE", "cpu") == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")


def shared_data_dir() -> Path | None:
    """JFBENCH_DATA_DIR (the benchmark data folder; `.ci/run` sets it), else None (package data only)."""
    env = os.environ.get("JFBENCH_DATA_DIR")
    return Path(env) if env else None


@functools.cache
def benchmark_data_dir() -> Path:
    """JFBENCH_DATA_DIR, else the made-up data folder (`made_up_data_dir`): for tests that need a
    few records of a suite, not the real ones."""
    return shared_data_dir() or made_up_data_dir()


@functools.cache
def made_up_data_dir() -> Path:
    """A small made-up data folder (tests/benchmark_data.py), written once per session."""
    from tests.benchmark_data import write_benchmark_data

    root = Path(tempfile.mkdtemp(prefix="jfbench-test-data-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return write_benchmark_data(root)


# No test skips for want of a data folder (tests/test_skip_reasons.py; the summary line below counts
# the skips): the tests of the benchmark files' contents (record counts, ids, texts, reference
# solutions) take `data_folder`, so they check the made-up folder always and the real one too where
# JFBENCH_DATA_DIR is set.
@pytest.fixture(params=["made-up", *(["real"] if shared_data_dir() else [])])
def data_folder(request: pytest.FixtureRequest) -> tuple[Path, DataFacts]:
    """(a benchmark data folder, what its files hold)."""
    from tests.benchmark_data import MADE_UP_FACTS, REAL_FACTS

    if request.param == "real":
        return shared_data_dir(), REAL_FACTS
    return made_up_data_dir(), MADE_UP_FACTS


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001 (pytest's hook signature)
    """One line that sorts the skips by why: so a new skip of a new kind is seen, not buried in 'N skipped'."""
    from collections import Counter

    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped:
        return
    reasons = Counter(skip_kind(str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else "")
                      for report in skipped)
    terminalreporter.write_line("skips by kind: " + ", ".join(f"{n} {kind}" for kind, n in reasons.most_common()))


def skip_kind(reason: str) -> str:
    """The kind of a skip reason: what it would take to run the test."""
    lowered = reason.lower()
    if "vllm" in lowered:
        return "need vLLM's environment"
    if "jfbench_data_dir" in lowered or "data folder" in lowered:
        return "need the real data folder"
    return "other (a tool or device absent here)"


@pytest.fixture(scope="session")
def micro_target() -> Path:
    """The `micro` toy target (~1-2 min to train once, then reused from the cache; JFBENCH_CACHE overrides)."""
    from jetflow_bench.toy import ensure_toy_target

    return ensure_toy_target("micro", shared_data_dir(), show_progress=False)


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """`cli("check", "--run", ...)` runs jfbench in-process through the real entry point (its error
    handling included) and returns (exit code, stdout, stderr)."""
    from jetflow_bench.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["jfbench", *args])
        try:
            main()
            code = 0
        except SystemExit as exit_:
            code = exit_.code or 0
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run
