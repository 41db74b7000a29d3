"""scripts/gpu_check.sh --dry-run on a CPU: every part runs up to its first CUDA call."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.random_models import save_random_model

ROOT = Path(__file__).resolve().parent.parent


def dry_run_args(tmp_path: Path) -> list[str]:
    """A dry run's command line over a random stand-in for the deep target and empty head records."""
    deep = save_random_model(tmp_path / "deep")
    for name in ("jetflow", "dflash", "eagle"):
        (tmp_path / "heads" / name).mkdir(parents=True)
        (tmp_path / "heads" / name / "config.json").write_text(json.dumps({}))
    return ["bash", str(ROOT / "scripts/gpu_check.sh"), "--dry-run", "--deep", str(deep), "--heads", str(tmp_path / "heads"),
            "--data-dir", str(tmp_path), "--shapes", str(tmp_path / "no-shapes"), "--out", str(tmp_path / "out")]


@pytest.mark.slow  # eight parts, each starting Python and importing torch (minutes on 2 loaded cores)
def test_dry_run_reaches_the_gpu_in_every_part(tmp_path):
    """Bugs caught: a part whose arguments no longer parse or whose files are missing (it would fail on
    the GPU machine, where a rerun is costly), and a preflight that lets a missing piece through."""
    env, args = {**os.environ, "PYTHON": sys.executable}, dry_run_args(tmp_path)
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=1800)
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert done.returncode == 0, summary
    for part in ("calibrate", "compile-8b", "compile-deep", "baseline", "sweep", "projection"):
        assert f"| {part} | dry-run ok (stopped at the first CUDA call)" in summary
    assert "| kernels | dry-run ok" in summary
    missing = subprocess.run([*args[:-2], "--heads", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out2")],
                             env=env, capture_output=True, text=True, timeout=600)
    assert missing.returncode == 1 and "no jetflow/config.json" in missing.stdout


def test_parts_selects_what_runs_and_names_an_unknown_one(tmp_path):
    """Bugs caught: --parts ignored (a rerun of one failed part would spend a lease on all of them),
    and a misspelt part silently running nothing."""
    env, args = {**os.environ, "PYTHON": sys.executable}, dry_run_args(tmp_path)
    done = subprocess.run([*args, "--parts", "calibrate"], env=env, capture_output=True, text=True, timeout=600)
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert done.returncode == 0, summary
    assert "| calibrate | dry-run ok" in summary and "| sweep |" not in summary and "| kernels |" not in summary
    wrong = subprocess.run([*args, "--parts", "calibrate,sweeep"], env=env, capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and "sweeep" in wrong.stderr and "projection" in wrong.stderr
