"""Drafter plug-ins. Built-ins are registered lazily by name (into `jetflow_bench.plugins.DRAFTERS`); third parties use the
``jfbench.drafters`` entry-point group (value ``"module:Class"``)."""

from drafters.base import Drafter
from jetflow_bench.errors import JfbenchError
from jetflow_bench.plugins import DRAFTERS

DRAFTERS.register("ngram", "drafters.ngram:NgramDrafter", aliases=("prompt-lookup", "pld"))
DRAFTERS.register("oracle", "drafters.oracle:OracleDrafter")
DRAFTERS.register("eagle", "drafters.eagle:EagleDrafter")
DRAFTERS.register("eagle3", "drafters.eagle:Eagle3Drafter")
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
