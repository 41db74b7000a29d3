"""One colour per drafter, the same in every figure and every report.

Readers compare figures side by side (and reports across runs), so a drafter's colour must not
depend on which drafters a run happens to contain. An arm named like a drafter family has the
colour its record declares (`jetflow_bench.plugins.Family.colour`: the built-ins take the
colour-blind-safe Okabe–Ito set); the AR baseline is grey; any other name gets a colour picked by
a stable hash of the name, so a third-party drafter is also consistent across runs.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from jetflow_bench.core.arms import AR_ARM
from jetflow_bench.plugins import FAMILIES, family_colour

AR_COLOR = "#7f7f7f"
# For names without a declared colour; none of these is close to a built-in family's colour or to grey.
EXTRA: tuple[str, ...] = ("#56b4e9", "#f0e442", "#8c564b", "#17becf", "#bcbd22", "#9467bd", "#393b79", "#ad494a")


def drafter_color(name: str) -> str:
    """Hex colour of drafter `name` (case-insensitive); names without a declared colour hash into EXTRA."""
    key = name.lower()
    if key == AR_ARM:
        return AR_COLOR
    return family_colour(key) or EXTRA[zlib.crc32(key.encode()) % len(EXTRA)]


def drafter_order(names: Iterable[str]) -> list[str]:
    """Distinct `names` in legend order: the baseline, the families as registered (oldest first), then others alphabetically."""
    distinct = set(names)
    known = [n for n in (AR_ARM, *FAMILIES.registered()) if n in distinct]
    return known + sorted(distinct - set(known))


def palette(names: Iterable[str]) -> dict[str, str]:
    """{name: colour} for seaborn's `palette=` argument, in legend order."""
    return {name: drafter_color(name) for name in drafter_order(names)}
