"""Compare two arms of one sweep run request by request: verify steps, accepted tokens (kept after
the stop rule, and raw), outputs, and τ per draft over the cell.

Usage: python results/baselines/vllm-heads/compare_engines.py RUN ARM_A ARM_B
(ARM as the run's cells name it, e.g. "dflash[fanout=1]" and "vllm:dflash").
"""

import sys

import pandas as pd

run, arm_a, arm_b = sys.argv[1:4]
requests = pd.read_parquet(f"{run}/requests.parquet")
summary = pd.read_csv(f"{run}/summary.csv")


def arm_rows(frame: pd.DataFrame, arm: str) -> pd.DataFrame:
    name = frame["drafter"] + frame["variant"].map(lambda v: "" if v == "default" else f"[{v}]")
    return frame[name == arm]


a, b = (arm_rows(requests, arm).set_index("request").sort_index() for arm in (arm_a, arm_b))
table = pd.DataFrame({
    f"steps {arm_a}": a.steps, f"steps {arm_b}": b.steps,
    f"accepted {arm_a}": a.accepted, f"accepted {arm_b}": b.accepted,
    f"raw {arm_a}": a.accepted_raw, f"raw {arm_b}": b.accepted_raw,
    "same output": [list(x) == list(y) for x, y in zip(a.output_ids, b.output_ids, strict=True)],
})
print(table.to_string())
for arm in (arm_a, arm_b):
    row = arm_rows(summary, arm).iloc[0]
    print(f"{arm}: steps {row.n_steps}, drafted {row.drafted}, accepted {row.accepted} (raw {row.accepted_raw}), "
          f"tau {row.tau:.4f}, tau per draft {row.tau_per_draft:.4f}, tokens/s {row.tokens_per_s:.1f}, "
          f"unexcused divergences {row.lossless_unexcused}")
ta, tb = (arm_rows(summary, arm).iloc[0].tau_per_draft for arm in (arm_a, arm_b))
print(f"tau per draft: {arm_b} / {arm_a} = {tb / ta:.4f}")
