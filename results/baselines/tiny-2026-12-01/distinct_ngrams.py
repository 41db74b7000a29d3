"""Distinct-4-gram ratio of the AR outputs of a sweep run (a target that repeats itself inflates τ).

    python distinct_ngrams.py RUN_FOLDER [n]

Reads RUN_FOLDER/requests.parquet (one row per request, `output_ids`), takes the AR baseline at
temperature 0, and prints distinct n-grams / all n-grams over every output (n = 4 by default).
"""

import sys
from pathlib import Path

import pandas as pd

run, n = Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 4
requests = pd.read_parquet(run / "requests.parquet")
ar = requests[(requests["drafter"] == "ar") & (requests.get("temperature", 0.0) == 0.0)]
grams = [tuple(ids[i : i + n]) for ids in ar["output_ids"] for i in range(len(ids) - n + 1)]
print(f"{len(ar)} AR outputs, {len(grams)} {n}-grams, distinct ratio {len(set(grams)) / len(grams):.3f}")
