"""The block-head families: dflash and jetflow (with jetflow-refine, which drafts from jetflow's
heads), sharing one head, one objective class and their recipe fields. Their records, torch-free
(`--help` reads them).

Modules: `dflash` and `jetflow` (the drafters), `training` (the objectives). ``BLOCK_RECORDED``:
fields their heads wrote into their recipe before families owned their fields, at the values
every such head had; they stay in the recipe record so cached heads keep their cache keys.

The ``layout``: dflash leaves it unset (its blocks are all-mask), jetflow defaults to ``mask``
(every block [anchor, MASK x D], causal: DFlash's training with the in-block mask changed, as the
public reimplementations of the JetFlow recipe train it), and jetflow-refine's heads default to
``packed`` (``train_defaults``). A jetflow head that records the layout unset was trained under
the old default, packed for a causal head (`old_recipe` labels it).
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

from drafters.axes import BLOCK_AXES, JETFLOW_AXES
from jetflow_bench.plugins import Family
from jetflow_bench.training.recipe import RecipeOption

LAYOUTS = ("mask", "prefix", "packed")
LAYOUT = RecipeOption(
    "layout", str, None, choices=LAYOUTS,
    help="training blocks: mask ([anchor, MASK x D] only: pass 1 as drafted; dflash's blocks, jetflow's default), "
         "prefix (a random-length real prefix, then masks; jetflow), or packed (true path + a MASK query per "
         "node, what a refinement pass queries; causal jetflow heads, jetflow-refine's default)",
)
PREFIX_ZERO = RecipeOption(
    "prefix_zero", float, 0.5, minimum=0.0, maximum=1.0,
    help="share of blocks trained all-masks (pass 1); the rest keep a real prefix",
)
MATCH_DEPTH1 = RecipeOption(
    "match_depth1", bool, False,
    help="prefix-layout heads (dflash, jetflow --layout prefix): add one-mask blocks until each sequence "
         "gives as many depth-1 queries as the packed layout",
)
BLOCK_RECORDED = {"ttt_steps": None}
OLD_JETFLOW_LAYOUTS = {"causal": "packed", "bidirectional": "prefix"}  # what an unset layout meant before issue 52


def dflash_all_mask(layout: str | None) -> bool:
    """Whether a dflash head trained with this recorded ``layout`` trained on all-mask blocks (dflash
    leaves it unset): the head a causal jetflow head is the in-block-mask twin of (claim 2)."""
    return layout in (None, "mask")


def old_recipe(drafter: str | None, recipe: Mapping[str, Any]) -> str | None:
    """"old jetflow recipe (packed layout)" for a head trained under jetflow's default before issue 52
    (its recorded ``layout`` is unset), else None. ``recipe``: the head's ``training.config``."""
    if drafter != "jetflow" or "layout" not in recipe or recipe["layout"] is not None:
        return None
    return f"old jetflow recipe ({OLD_JETFLOW_LAYOUTS.get(recipe.get('head'), 'packed')} layout)"


DFLASH = Family(
    "dflash",
    {"dflash": "drafters.block.dflash:DFlashDrafter"},
    training="drafters.block.training:DFLASH_TRAINING",
    recipe=(LAYOUT, PREFIX_ZERO, MATCH_DEPTH1),
    axes=BLOCK_AXES,
    exports={"dflash": "jetflow_bench.heads.checkpoint:export_dflash"},  # vLLM --speculative-config method "dflash"
    aliases={"dflash": ("dflash-t",)},
    colour="#009e73",  # bluish green
)
JETFLOW = Family(
    "jetflow",
    {"jetflow": "drafters.block.jetflow:JetFlowDrafter", "jetflow-refine": "drafters.block.jetflow:JetFlowRefineDrafter"},
    training="drafters.block.training:JETFLOW_TRAINING",
    recipe=(dataclasses.replace(LAYOUT, default="mask"), PREFIX_ZERO, MATCH_DEPTH1),
    axes=JETFLOW_AXES,
    train_defaults={"jetflow-refine": {"layout": "packed"}},
    colour="#d55e00",  # vermillion: the method under study stands out
)
