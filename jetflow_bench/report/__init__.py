"""Reading run folders back: figures (`plots`), the HTML report (`html`) and CI regression checks
(`check`). Nothing here loads a model, so reports and checks run anywhere the tables can be read."""

from pathlib import Path

# The committed CI reference run (relative to the repository root). Kept here, not in `check`, so that
# `jfbench check --help` can show it without importing pandas.
DEFAULT_BASELINE = Path("results/baselines/ci")
