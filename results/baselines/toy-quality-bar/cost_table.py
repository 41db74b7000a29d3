"""The CPU cost structure of one sweep run, per verify step: where a drafter's speed-up goes.

    python cost_table.py RUN_FOLDER [--calibration CAL.json]

Reads RUN_FOLDER/summary.csv (temperature 0) and prints a markdown table: per arm (drafter and
options), budget and batch size, τ, the mean drafting / verify / other milliseconds per verify step
and sequence (the batched steps' seconds over the per-sequence step count `n_steps`, so batch sizes
compare per sequence), and the decode speed-up over AR with its 95% CI; the AR rows give the plain step. With
--calibration (a `jfbench bench verify-cost` file), it also prints the batch-1 verify time at
exactly N tree nodes.
"""

import argparse
import json
from pathlib import Path

import pandas as pd

from jetflow_bench.core.arms import arm_label

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("run", type=Path)
parser.add_argument("--calibration", type=Path)
args = parser.parse_args()

summary = pd.read_csv(args.run / "summary.csv")
cells = summary[summary["temperature"] == 0.0]
print("| arm | B | batch | τ | draft ms | verify ms | other ms | step ms | speed-up [95% CI] |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for row in cells.sort_values(["batch_size", "drafter", "variant", "budget"]).itertuples():
    per_step = {k: 1e3 * getattr(row, k) / row.n_steps for k in ("draft_s", "verify_s", "other_s")}
    step = sum(per_step.values())
    speedup = (f"{row.speedup_decode_micro:.2f} [{row.speedup_decode_micro_lo:.2f}, {row.speedup_decode_micro_hi:.2f}]"
               if row.drafter != "ar" else "1")
    print(f"| {arm_label(row.drafter, row.variant)} | {row.budget} | {row.batch_size} | {row.tau:.2f} | {per_step['draft_s']:.2f} | {per_step['verify_s']:.2f} "
          f"| {per_step['other_s']:.2f} | {step:.2f} | {speedup} |")

if args.calibration:
    points = [p for p in json.loads(args.calibration.read_text())["points"] if p["batch"] == 1]
    print("\n| tree nodes N | " + " | ".join(str(p["tokens"]) for p in points) + " |")
    print("| --- |" + " --- |" * len(points))
    print("| verify ms | " + " | ".join(f"{1e3 * p['verify_s']:.1f}" for p in points) + " |")
