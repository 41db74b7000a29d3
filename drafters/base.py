"""The drafter port under the name plug-ins were written against (``from drafters.base import Drafter``).

The port itself lives in the engine (`jetflow_bench.engine.drafter`), which imports nothing from
this package; this module only re-exports it, so third-party drafters keep working unchanged.
"""

from jetflow_bench.engine.drafter import NOT_EXPLORED, OUTSIDE_TOP_K, Dists, DraftCost, Drafter, SequenceView

__all__ = ["NOT_EXPLORED", "OUTSIDE_TOP_K", "DraftCost", "Drafter", "Dists", "SequenceView"]
