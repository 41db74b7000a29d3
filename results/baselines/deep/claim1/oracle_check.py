"""Greedy speculative decoding simulated from the known output (`jetflow_bench.engine.simulate`),
against the engine's step counts in a committed run.

Greedy speculative decoding emits the plain decoder's tokens (losslessness), so each request's
output is known once one arm has run. Given it, a step's acceptance needs no target: the deepest
node of the drafter's tree whose root path spells the next output tokens, plus the bonus. The
drafter still runs live at every step, fed the target's features of the committed tokens from one
teacher-forced forward over prompt + output, so the simulation visits exactly the positions a run
at that budget visits (unlike the headroom replay, which reuses another budget's positions). If it
gives every request the engine's step count, a tau-only sweep could skip the target's tree
verification, the costliest part of a 256-node cell on a real target.

    python results/baselines/deep/claim1/oracle_check.py RUN_FOLDER 64,256

RUN_FOLDER: a complete tau-only run whose manifest names head folders that exist here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from jetflow_bench.core import runtime
from jetflow_bench.engine.simulate import simulated_steps
from jetflow_bench.sweep.grid import DrafterSpec
from jetflow_bench.sweep.hf_engine import HFEngine

BATCH = 16


def main(run: Path, budgets: list[int]) -> None:
    runtime.set_threads(1)
    manifest = json.loads((run / "manifest.json").read_text())
    engine = HFEngine.load(manifest["config"]["target"], "cpu", "float32")
    requests = pd.read_parquet(run / "requests.parquet")
    for spec in manifest["config"]["drafters"]:
        drafter = engine.build_drafter(DrafterSpec(spec["name"], checkpoint=spec["checkpoint"]), Path(spec["checkpoint"]))
        for budget in budgets:
            rows = requests[(requests["drafter"] == spec["name"]) & (requests["budget"] == budget)].sort_values("request")
            same = simulated = measured = emitted = 0
            for start in range(0, len(rows), BATCH):
                part = rows.iloc[start : start + BATCH]
                prompts = [engine.encode(text) for text in part["prompt"]]
                assert [len(p) for p in prompts] == part["prompt_tokens"].tolist(), "the prompts do not re-encode"
                outputs = [[int(t) for t in ids] for ids in part["output_ids"]]
                steps = simulated_steps(engine.target, drafter, prompts, outputs, budget)
                same += sum(s == m for s, m in zip(steps, part["steps"], strict=True))
                simulated, measured = simulated + sum(steps), measured + int(part["steps"].sum())
                emitted += sum(len(o) - 1 for o in outputs)  # token 0 comes from prefill
            print(f"{spec['name']} B={budget}: {same}/{len(rows)} requests with the engine's step count; "
                  f"tau measured {emitted / measured:.3f}, simulated {emitted / simulated:.3f}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), [int(b) for b in sys.argv[2].split(",")])
