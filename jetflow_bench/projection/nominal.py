"""Draft counters implied by a built-in drafter's algorithm, for runs recorded before the counters.

Runs written before steps carried `draft_passes` / `draft_entries` (e.g. the toy quality bar) can
still be projected for the built-in families, from what their algorithms do per step at budget B
(see each drafter's module docstring), with the drafter's default options unless the run's manifest
lists others. Every projected row says which source its counters came from, and the command prints
a warning. A plug-in drafter without recorded counters cannot be guessed: that is a user error.

    family   passes P                       entries E (per sequence, all passes)
    ngram    0                              0                     (host-side suffix lookup)
    dflash   1                              block                 (anchor + block − 1 MASK positions)
    jetflow  1 + r                          block + r · 2B        (upper bound: B nodes + ≤ B MASK queries)
    eagle    min(depth, B − 1)              1 + (P − 1) · top_k   (one frontier of ≤ top_k per depth)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Default options of the built-in drafters (drafters/jetflow.py, drafters/eagle.py).
JETFLOW_REFINE_PASSES = 1
EAGLE_DEPTH = 8
EAGLE_TOP_K = 8


def nominal_counters(drafter: str, budget: int, block_size: int | None, options: Mapping[str, Any]) -> tuple[float, float] | None:
    """(passes, entries) per step for a built-in family, or None when the family is unknown."""
    if budget <= 1:
        return 0.0, 0.0
    if drafter == "ngram":
        return 0.0, 0.0
    if drafter in ("dflash", "jetflow") and block_size is None:
        return None
    if drafter == "dflash":
        return 1.0, float(block_size)
    if drafter == "jetflow":
        r = int(options.get("refine_passes", JETFLOW_REFINE_PASSES))
        return 1.0 + r, float(block_size + r * 2 * budget)
    if drafter == "eagle":
        passes = min(int(options.get("depth", EAGLE_DEPTH)), budget - 1)
        return float(passes), float(1 + (passes - 1) * int(options.get("top_k", EAGLE_TOP_K)))
    return None
