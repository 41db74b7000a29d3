"""scripts/gpu_check.sh --dry-run on a CPU: every part runs up to its first CUDA call."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.random_models import save_random_model

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # seven parts, each starting Python and importing torch (minutes on 2 loaded cores)
def test_dry_run_reaches_the_gpu_in_every_part(tmp_path):
    """Bugs caught: a part whose arguments no longer parse or whose files are missing (it would fail on
    the GPU machine, where a rerun is costly), and a preflight that lets a missing piece through."""
    deep = save_random_model(tmp_path / "deep")
    for name in ("jetflow", "dflash", "eagle"):
        (tmp_path / "heads" / name).mkdir(parents=True)
        (tmp_path / "heads" / name / "config.json").write_text(json.dumps({}))
    env = {**os.environ, "PYTHON": sys.executable}
    args = ["bash", str(ROOT / "scripts/gpu_check.sh"), "--dry-run", "--deep", str(deep), "--heads", str(tmp_path / "heads"),
            "--data-dir", str(tmp_path), "--out", str(tmp_path / "out")]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=1800)
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert done.returncode == 0, summary
    for part in ("calibrate", "compile-8b", "compile-deep", "baseline", "sweep", "projection"):
        assert f"| {part} | dry-run ok (stopped at the first CUDA call)" in summary
    assert "| kernels | dry-run ok" in summary
    missing = subprocess.run([*args[:-2], "--heads", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out2")],
                             env=env, capture_output=True, text=True, timeout=600)
    assert missing.returncode == 1 and "no jetflow/config.json" in missing.stdout
