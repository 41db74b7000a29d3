"""scripts/gpu_claim1.py --rehearse: the claim-1 GPU window end to end on the CPU, shrunk.

The bugs it catches before a lent GPU's minutes are spent: a step that fails past its start (the
carried regen file not adopted, a flag the CLI refuses, a head folder the sweep cannot read), and
heads that do not train the same number of steps.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.data_dirs import benchmark_data_dir

ROOT = Path(__file__).resolve().parents[2]
RECIPE = {"prompts": 16, "max_new_tokens": 16}


@pytest.mark.slow
def test_rehearsal_runs_every_step_and_trains_a_matched_pair(micro_target, tmp_path, monkeypatch):
    from jetflow_bench.engine.target import TargetRunner
    from jetflow_bench.training import data as training_data
    from jetflow_bench.training.config import train_config

    monkeypatch.setenv("JFBENCH_CACHE", str(tmp_path / "cache"))
    target = TargetRunner.load(micro_target, "cpu", "float32")
    config = train_config("dflash", data_seed=0, **RECIPE)
    training_data.training_sequences(target, config, benchmark_data_dir(), show_progress=False)
    script = [sys.executable, str(ROOT / "scripts/gpu_claim1.py"), "--prompts", "16", "--max-new-tokens", "16"]
    carry = tmp_path / "carry"
    done = subprocess.run([*script, "--prepare", "--deep", str(micro_target), "--carry", str(carry),
                           "--data-dir", str(benchmark_data_dir())], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "MiB" in done.stdout, done.stdout + done.stderr
    for entry in (tmp_path / "cache" / "train_data").glob("regen-*.json"):
        entry.unlink()  # the window's machine has only what was carried

    out = tmp_path / "out"
    command = [*script, "--rehearse", "--deep", str(carry / "deep"), "--train-data", str(carry / "regen-deep.json"),
               "--data-dir", str(carry / "data"), "--out", str(out), "--limit", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| tau | ok |" in (out / "summary.md").read_text()
    records = {name: json.loads((out / "heads" / name / "config.json").read_text())["training"] for name in ("dflash", "jetflow")}
    assert {r["steps_done"] for r in records.values()} == {4}
    assert records["dflash"]["recipe"]["layout"] == records["jetflow"]["recipe"]["layout"] == "mask"
    adopted = json.loads(next((tmp_path / "cache" / "train_data").glob("regen-*.json")).read_text())
    assert adopted["key"]["adopted"] == {"dtype": "torch.float32", "device": "cpu"}  # trained on the carried ids
    table = (out / "tau.md").read_text()
    assert "jetflow" in table and "dflash" in table and "| 256 |" in table


def test_a_regen_file_of_other_prompts_is_refused(micro_target, tmp_path, monkeypatch):
    from jetflow_bench.core.errors import JfbenchError
    from jetflow_bench.engine.target import TargetRunner
    from jetflow_bench.training.config import train_config
    from jetflow_bench.training.data import adopt_regenerated

    monkeypatch.setenv("JFBENCH_CACHE", str(tmp_path / "cache"))
    target = TargetRunner.load(micro_target, "cpu", "float32")
    other = tmp_path / "regen.json"
    other.write_text(json.dumps({"key": {"prompts": "0" * 64}, "sequences": []}))
    with pytest.raises(JfbenchError, match="another target, prompts"):
        adopt_regenerated(target, train_config("dflash", **RECIPE), benchmark_data_dir(), other)
    other.write_text("not json")
    with pytest.raises(JfbenchError, match="is not a regen cache file"):
        adopt_regenerated(target, train_config("dflash", **RECIPE), benchmark_data_dir(), other)
