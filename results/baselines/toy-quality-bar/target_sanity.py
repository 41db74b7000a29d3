"""How predictable a toy target is, from one sweep run: a target that repeats itself inflates every τ.

    python target_sanity.py RUN_FOLDER [--samples N]

Reads RUN_FOLDER/requests.parquet and summary.csv (a sweep with the AR baseline and, for a_1, an
`eagle` arm, at temperature 0) and prints
  - the distinct-4-gram ratio of the AR outputs (distinct 4-grams / all 4-grams over every output),
  - EAGLE's first-token acceptance a_1 per budget,
  - the first N greedy AR outputs (default 2), as the target wrote them.
"""

import argparse
from pathlib import Path

import pandas as pd

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("run", type=Path)
parser.add_argument("--samples", type=int, default=2)
args = parser.parse_args()

requests = pd.read_parquet(args.run / "requests.parquet")
ar = requests[(requests["drafter"] == "ar") & (requests["temperature"] == 0.0)].sort_values("request")
grams = [tuple(ids[i : i + 4]) for ids in ar["output_ids"] for i in range(len(ids) - 3)]
print(f"{len(ar)} AR outputs, {len(grams)} 4-grams, distinct-4-gram ratio {len(set(grams)) / len(grams):.3f}")

summary = pd.read_csv(args.run / "summary.csv")
eagle = summary[(summary["drafter"] == "eagle") & (summary["temperature"] == 0.0)]
for row in eagle.sort_values("budget").itertuples():
    print(f"eagle B={row.budget}: a_1 = {row.a_1:.3f}")

for row in ar.head(args.samples).itertuples():
    print(f"\n--- request {row.request} (prompt ends: {row.prompt[-80:]!r})\n{row.output}")
