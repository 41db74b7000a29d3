"""Where tests read benchmark data: the real folder (JFBENCH_DATA_DIR) or a made-up one."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path


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
    """A small made-up data folder (tests/helpers/benchmark_data.py), written once per session."""
    from tests.helpers.benchmark_data import write_benchmark_data

    root = Path(tempfile.mkdtemp(prefix="jfbench-test-data-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return write_benchmark_data(root)
