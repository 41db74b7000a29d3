"""Drafter plug-ins. Built-ins are registered lazily by name; third parties use the
``jfbench.drafters`` entry-point group (value ``"module:Class"``)."""

from drafters.base import Drafter
from jetflow_bench.registry import Registry

DRAFTERS: Registry[type[Drafter]] = Registry("drafter", entry_point_group="jfbench.drafters")
DRAFTERS.register("ngram", "drafters.ngram:NgramDrafter", aliases=("prompt-lookup", "pld"))
DRAFTERS.register("oracle", "drafters.oracle:OracleDrafter")
DRAFTERS.register("eagle", "drafters.eagle:EagleDrafter")
DRAFTERS.register("dflash", "drafters.dflash:DFlashDrafter", aliases=("dflash-t",))
DRAFTERS.register("jetflow", "drafters.jetflow:JetFlowDrafter")

__all__ = ["DRAFTERS", "Drafter"]
