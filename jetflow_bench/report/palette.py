"""One colour per drafter, the same in every figure and every report.

Readers compare figures side by side (and reports across runs), so a drafter's colour must not
depend on which drafters a run happens to contain. Built-in drafters have fixed colours from the
colour-blind-safe Okabe–Ito set; the AR baseline is grey; any other name gets a colour picked by a
stable hash of the name, so a third-party drafter is also consistent across runs.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from jetflow_bench.arms import AR_ARM

AR_COLOR = "#7f7f7f"
FIXED: dict[str, str] = {
    AR_ARM: AR_COLOR,
    "jetflow": "#d55e00",  # vermillion: the method under study stands out
    "dflash": "#009e73",  # bluish green
    "eagle": "#0072b2",  # blue
    "ngram": "#cc79a7",  # reddish purple
    "oracle": "#e69f00",  # orange
}
# For names outside FIXED; none of these is close to a fixed colour or to grey.
EXTRA: tuple[str, ...] = ("#56b4e9", "#f0e442", "#8c564b", "#17becf", "#bcbd22", "#9467bd", "#393b79", "#ad494a")
# Legend order: baseline first, then the paper's families from oldest to newest.
ORDER: tuple[str, ...] = (AR_ARM, "ngram", "oracle", "eagle", "dflash", "jetflow")


def drafter_color(name: str) -> str:
    """Hex colour of drafter `name` (case-insensitive); unknown names hash into EXTRA."""
    key = name.lower()
    return FIXED.get(key) or EXTRA[zlib.crc32(key.encode()) % len(EXTRA)]


def drafter_order(names: Iterable[str]) -> list[str]:
    """Distinct `names` in legend order: known drafters in ORDER, then others alphabetically."""
    distinct = set(names)
    known = [n for n in ORDER if n in distinct]
    return known + sorted(distinct - set(known))


def palette(names: Iterable[str]) -> dict[str, str]:
    """{name: colour} for seaborn's `palette=` argument, in legend order."""
    return {name: drafter_color(name) for name in drafter_order(names)}
