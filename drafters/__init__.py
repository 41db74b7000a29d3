"""Drafter plug-ins. Built-ins are registered lazily by name (into `jetflow_bench.plugins.DRAFTERS`); third parties use the
``jfbench.drafters`` entry-point group (value ``"module:Class"``)."""

import importlib
from pathlib import Path
from typing import Any

from jetflow_bench.ablation_axes import ABLATION_AXES
from jetflow_bench.errors import JfbenchError
from jetflow_bench.plugins import DRAFTERS
from jetflow_bench.training.recipe import RECIPES

DRAFTERS.register("ngram", "drafters.ngram:NgramDrafter", aliases=("prompt-lookup", "pld"))
DRAFTERS.register("oracle", "drafters.oracle:OracleDrafter")
DRAFTERS.register("eagle", "drafters.eagle:EagleDrafter")
DRAFTERS.register("eagle3", "drafters.eagle:Eagle3Drafter")
DRAFTERS.register("dflash", "drafters.dflash:DFlashDrafter", aliases=("dflash-t",))
DRAFTERS.register("jetflow", "drafters.jetflow:JetFlowDrafter")
DRAFTERS.register("jetflow-refine", "drafters.jetflow:JetFlowRefineDrafter")
RECIPES.register("eagle", "drafters.recipes:EAGLE_OPTIONS")
RECIPES.register("dflash", "drafters.recipes:BLOCK_OPTIONS")
RECIPES.register("jetflow", "drafters.recipes:JETFLOW_OPTIONS")
ABLATION_AXES.register("eagle", "drafters.axes:TREE_AXES")
ABLATION_AXES.register("eagle3", "drafters.axes:TREE_AXES")
ABLATION_AXES.register("dflash", "drafters.axes:BLOCK_AXES")
ABLATION_AXES.register("jetflow", "drafters.axes:JETFLOW_AXES")
ABLATION_AXES.register("jetflow-refine", "drafters.axes:JETFLOW_AXES")



# `jfbench export --format NAME`: the writer of each serving layout ("module:function"; loaded on use).
EXPORT_FORMATS: dict[str, str] = {
    "dflash": "jetflow_bench.heads.checkpoint:export_dflash",  # vLLM --speculative-config method "dflash"
    "eagle3": "drafters.eagle3:export_eagle3",  # vLLM method "eagle3", SpecForge, SGLang
}


def export_head(source: Path, fmt: str, out: Path) -> Path:
    """Write the head at ``source`` in the serving layout ``fmt`` into ``out``."""
    if fmt not in EXPORT_FORMATS:
        raise JfbenchError(f"unknown export format {fmt!r}: choose one of {', '.join(EXPORT_FORMATS)}")
    if not (Path(source) / "config.json").is_file():
        raise JfbenchError(f"{source} is not a head folder (no config.json): pass a folder made by `jfbench train` or a released head")
    module, _, attr = EXPORT_FORMATS[fmt].partition(":")
    return getattr(importlib.import_module(module), attr)(Path(source), Path(out))


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


def __getattr__(name: str) -> Any:
    """`Drafter` loads on first use (it imports torch): `--help` reads the recipe registrations above."""
    if name == "Drafter":
        from jetflow_bench.engine.drafter import Drafter

        return Drafter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DRAFTERS", "EXPORT_FORMATS", "Drafter", "export_head", "runnable_drafter"]
