"""scripts/gpu_check.sh on a CPU: the dry run reaches the GPU in every part; the rehearsal runs every
part to its end, shrunk, and prints each part's summary line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.data_dirs import benchmark_data_dir
from tests.helpers.random_models import save_random_model

ROOT = Path(__file__).resolve().parents[2]
PARTS = ("steps", "baseline", "sweep", "kernels", "calibrate", "projection")


def check_args(tmp_path: Path, heads: Path | None = None) -> list[str]:
    """The script's command line over a random stand-in for the deep target; ``heads`` None: empty head records."""
    deep = save_random_model(tmp_path / "deep")
    if heads is None:
        heads = tmp_path / "heads"
        for name in ("jetflow", "dflash", "eagle"):
            (heads / name).mkdir(parents=True)
            (heads / name / "config.json").write_text(json.dumps({}))
    return ["bash", str(ROOT / "scripts/gpu_check.sh"), "--deep", str(deep), "--heads", str(heads),
            "--data-dir", str(benchmark_data_dir()), "--out", str(tmp_path / "out")]


@pytest.mark.slow  # four parts, each starting Python and importing torch (minutes on 2 loaded cores)
def test_dry_run_reaches_the_gpu_in_every_part(tmp_path):
    """Bugs caught: a part whose arguments no longer parse or whose files are missing (it would fail on
    the GPU machine, where a rerun is costly), and a preflight that lets a missing piece through."""
    env, args = {**os.environ, "PYTHON": sys.executable}, [*check_args(tmp_path), "--dry-run"]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=1800)
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert done.returncode == 0, summary
    for part in ("steps", "baseline", "sweep", "calibrate", "projection"):
        assert f"| {part} | dry-run ok (stopped at the first CUDA call)" in summary
    assert "| kernels | dry-run ok" in summary
    missing = subprocess.run([*args, "--heads", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out2")],
                             env=env, capture_output=True, text=True, timeout=600)
    assert missing.returncode == 1 and "no jetflow/config.json" in missing.stdout


@pytest.mark.slow  # every part to its end on the CPU: about ten Python start-ups and small decodes
def test_rehearsal_runs_every_part_to_its_end_with_a_summary_line_each(tmp_path):
    """`--rehearse`, shrunk, on random stand-ins for deep and its heads. Bugs caught: anything past
    the first CUDA call that a dry run cannot reach (a snippet's error, a sweep arm that does not
    build, a summary that cannot read its part's outputs), and a part that ends without its line."""
    from jetflow_bench.engine.target import TargetRunner
    from tests.helpers.heads import HEADS, make_head

    args = check_args(tmp_path, tmp_path / "heads")
    runner = TargetRunner.load(args[args.index("--deep") + 1], device="cpu")
    for name, cfg in HEADS.items():
        make_head(runner, tmp_path / "heads" / name, name, cfg)
    done = subprocess.run([*args, "--rehearse"], env={**os.environ, "PYTHON": sys.executable}, capture_output=True,
                          text=True, timeout=3600)
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert done.returncode == 0, summary + done.stdout[-3000:]
    for part in PARTS:
        assert f"| {part} | ok |" in summary and f"\n  {part}: " in done.stdout, part
    assert "qwen3-8b AR step b1 vs roofline" in done.stdout and "smollm2-135m AR step" in done.stdout
    assert "ours/HF static-cache generate: eager b1" in done.stdout and "graphs b8" in done.stdout
    assert all("jetflow-refine" in line for line in done.stdout.splitlines() if line.startswith("  sweep: "))
    steps = json.loads((tmp_path / "out" / "steps.json").read_text())
    assert set(steps["qwen3-8b"]) == {"eager", "inductor"} and steps["qwen3-8b"]["inductor"]["forwards"]
    for label in ("graphs", "eager"):
        cells = json.loads((tmp_path / "out" / f"sweep-{label}" / "manifest.json").read_text())["n_cells"]
        assert cells == 2 * (1 + 5 * 3)  # batch sizes x (AR + 5 arms x 3 budgets)


def test_parts_selects_what_runs_and_names_an_unknown_one(tmp_path):
    """Bugs caught: --parts ignored (a rerun of one failed part would spend a lease on all of them),
    and a misspelt part silently running nothing."""
    env, args = {**os.environ, "PYTHON": sys.executable}, [*check_args(tmp_path), "--dry-run"]
    done = subprocess.run([*args, "--parts", "baseline"], env=env, capture_output=True, text=True, timeout=600)
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert done.returncode == 0, summary
    assert "| baseline | dry-run ok" in summary and "| sweep |" not in summary and "| steps |" not in summary
    wrong = subprocess.run([*args, "--parts", "steps,sweeep"], env=env, capture_output=True, text=True, timeout=60)
    assert wrong.returncode == 2 and "sweeep" in wrong.stderr and "kernels" in wrong.stderr
