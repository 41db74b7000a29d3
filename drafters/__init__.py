"""Drafter plug-ins. Built-ins are registered lazily by name; third parties use the
``jfbench.drafters`` entry-point group (value ``"module:Class"``)."""

from drafters.base import Drafter
from jetflow_bench.errors import JfbenchError
from jetflow_bench.registry import Registry

DRAFTERS: Registry[type[Drafter]] = Registry("drafter", entry_point_group="jfbench.drafters")
DRAFTERS.register("ngram", "drafters.ngram:NgramDrafter", aliases=("prompt-lookup", "pld"))
DRAFTERS.register("oracle", "drafters.oracle:OracleDrafter")
DRAFTERS.register("eagle", "drafters.eagle:EagleDrafter")
DRAFTERS.register("eagle3", "drafters.eagle3:Eagle3Drafter", aliases=("eagle-3",))
DRAFTERS.register("dflash", "drafters.dflash:DFlashDrafter", aliases=("dflash-t",))
DRAFTERS.register("jetflow", "drafters.jetflow:JetFlowDrafter")
DRAFTERS.register("jetflow-refine", "drafters.jetflow:JetFlowRefineDrafter")



def runnable_drafter(name: str) -> str:
    """The canonical name of a drafter a sweep can build from the command line.

    Test doubles that need inputs only Python can give (``Drafter.cli_refusal``) are refused here,
    before any model loads.
    """
    canonical = DRAFTERS.canonical(name)
    refusal = DRAFTERS.get(canonical).cli_refusal
    if refusal:
        raise JfbenchError(f"drafter {name!r} cannot run from the command line: {refusal}")
    return canonical


__all__ = ["DRAFTERS", "Drafter", "runnable_drafter"]
