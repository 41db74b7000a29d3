"""Print the Poisson rates at the given multiples of plain decoding's saturation rate.

The saturation rate is what plain decoding serves when every request is sent at once
(`--load poisson:inf`): the AR cell's output tokens/s over its mean output length, in requests
per second. Usage: python levels.py RUN 0.5,1,2,4
"""

from __future__ import annotations

import sys

import pandas as pd

from jetflow_bench.core.arms import AR_ARM
from jetflow_bench.report.loading import load_run


def saturation_rate(run_dir: str) -> float:
    table = load_run(run_dir).load_table()
    plain = table[(table["drafter"] == AR_ARM) & (table["load"] == "poisson:inf")]
    requests = pd.read_parquet(f"{run_dir}/requests.parquet")
    return float(plain["output_tok_s"].iloc[0] / requests.loc[requests["drafter"] == AR_ARM, "new_tokens"].mean())


if __name__ == "__main__":
    rate = saturation_rate(sys.argv[1])
    print(f"saturation: {rate:.3f} requests/s", file=sys.stderr)
    print(",".join(f"{rate * float(m):.3g}" for m in sys.argv[2].split(",")))
