"""Pytest fixtures shared across the test folders (plain helpers live in `tests/helpers/`).

Model-building imports stay inside the fixtures, so collecting a test that needs none stays light.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.helpers.data_dirs import made_up_data_dir, shared_data_dir
from tests.helpers.skips import skip_kind

if TYPE_CHECKING:
    from jetflow_bench.engine.target import TargetRunner
    from tests.helpers.benchmark_data import DataFacts

# Idle OpenMP threads sleep instead of spinning: on 2 shared cores a spinning pool in one process
# (torch's default) starves every other (sandboxed programs, subprocess CLIs), slowing tests ~4x.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The Triton kernel tests run in Triton's interpreter on a CPU; the flag must be set before the first
# `import torch`, which loads Triton (tests/engine/test_kernels.py; JFBENCH_TEST_DEVICE=cuda runs them compiled).
if os.environ.get("JFBENCH_TEST_DEVICE", "cpu") == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")


# No test skips for want of a data folder (tests/cli/test_skip_reasons.py; the summary line below counts
# the skips): the tests of the benchmark files' contents (record counts, ids, texts, reference
# solutions) take `data_folder`, so they check the made-up folder always and the real one too where
# JFBENCH_DATA_DIR is set.
@pytest.fixture(params=["made-up", *(["real"] if shared_data_dir() else [])])
def data_folder(request: pytest.FixtureRequest) -> tuple[Path, DataFacts]:
    """(a benchmark data folder, what its files hold)."""
    from tests.helpers.benchmark_data import MADE_UP_FACTS, REAL_FACTS

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


@pytest.fixture(scope="session")
def micro_target() -> Path:
    """The `micro` toy target (~1-2 min to train once, then reused from the cache; JFBENCH_CACHE overrides)."""
    from jetflow_bench.toy import ensure_toy_target

    return ensure_toy_target("micro", shared_data_dir(), show_progress=False)


@pytest.fixture(scope="session")
def learned_heads(micro_target: Path) -> dict[str, Path]:
    """Briefly trained eagle, dflash and jetflow heads on the micro toy target, on the made-up training
    sets where no data folder is given. `ensure_head` caches them by recipe, so they train once per cache
    folder (~1 min on 2 cores)."""
    from jetflow_bench.training import QUICK_RECIPE, ensure_head
    from tests.helpers.data_dirs import benchmark_data_dir

    return {
        name: ensure_head(micro_target, name, data_dir=benchmark_data_dir(), device="cpu", show_progress=False, **QUICK_RECIPE)
        for name in ("eagle", "dflash", "jetflow")
    }


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> TargetRunner:
    """A random 2-layer Qwen3 target (tests/helpers/heads.py), loaded once per test module."""
    from jetflow_bench.engine.target import TargetRunner
    from tests.helpers.heads import save_target

    return TargetRunner.load(save_target(tmp_path_factory.mktemp("target")), device="cpu")


@pytest.fixture(scope="module")
def checkpoints(target: TargetRunner, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An untrained head of each learned family (`HEADS`) for `target`, saved once per test module."""
    from tests.helpers.heads import HEADS, make_head

    root = tmp_path_factory.mktemp("heads")
    return {name: make_head(target, root / name, name, cfg) for name, cfg in HEADS.items()}


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


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A `vllm` that runs the stand-in server (tests/helpers/fake_vllm.py); the installed-vLLM query answers for it."""
    from jetflow_bench.integrations import vllm_engine
    from jetflow_bench.integrations.vllm_arms import VLLMInstall

    script = tmp_path / "bin" / "vllm"
    script.parent.mkdir()
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).parent / 'helpers' / 'fake_vllm.py'} \"$@\"\n")
    script.chmod(0o755)
    monkeypatch.setattr(vllm_engine, "discover", lambda _bin: VLLMInstall("0.0-fake", ("ngram",)))
    return str(script)
