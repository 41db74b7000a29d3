"""Draft counters implied by a drafter's algorithm, for runs recorded before the counters.

Runs written before steps carried `draft_passes` / `draft_entries` (e.g. the toy quality bar) can
still be projected for the families that declare what their algorithm does per step at budget B
(`Drafter.nominal_counters`, with the drafter's own default options unless the run's manifest lists
others). Every projected row says which source its counters came from, and the command prints
a warning. A drafter that declares none cannot be guessed: that is a user error. The built-ins:

    family   passes P                       entries E (per sequence, all passes)
    ngram    0                              0                     (host-side suffix lookup)
    dflash   1                              block                 (anchor + block − 1 MASK positions)
    jetflow  1 + r                          block + r · 2B        (upper bound: B nodes + ≤ B MASK queries)
    eagle    min(depth, B − 1)              1 + (P − 1) · top_k   (one frontier of ≤ top_k per depth)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jetflow_bench.plugins import DRAFTERS


def nominal_counters(drafter: str, budget: int, block_size: int | None, options: Mapping[str, Any]) -> tuple[float, float] | None:
    """(passes, entries) per step, from the drafter's own `Drafter.nominal_counters` and defaults; None
    when the drafter is not registered or cannot say."""
    if budget <= 1:
        return 0.0, 0.0
    if drafter not in DRAFTERS:
        return None
    return DRAFTERS.get(drafter).nominal_counters(budget, block_size, options)
