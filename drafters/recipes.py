"""The recipe fields the built-in families declare for their heads (no torch: `--help` reads them).

Each tuple is a family's `RecipeOption`s: its `TrainingObjective` (``drafters/eagle_training.py``,
``drafters/block_training.py``) reads and checks them, and `drafters/__init__.py` registers them
under the family's name in `jetflow_bench.training.recipe.RECIPES`. ``*_RECORDED``: fields heads
of the family wrote into their recipe before families owned their fields, at the values every
such head had; they stay in its recipe record so cached heads keep their cache keys.

The block heads' ``layout``: dflash leaves it unset (its blocks are all-mask), jetflow defaults to
``mask`` (every block [anchor, MASK x D], causal: DFlash's training with the in-block mask
changed, as the public reimplementations of the JetFlow recipe train it), and jetflow-refine's
heads default to ``packed`` (`JetFlowRefineDrafter.train_defaults`). A jetflow head that records
the layout unset was trained under the old default, packed for a causal head (`old_recipe` labels it).
"""

import dataclasses
from collections.abc import Mapping
from typing import Any

from jetflow_bench.training.recipe import RecipeOption

TTT_STEPS = RecipeOption(
    "ttt_steps", int, None, minimum=1,
    help="training-time-test steps (own features fed back); default the drafted depth, block size - 1 "
         "(EAGLE-3 trains every step it drafts)",
)
EAGLE_OPTIONS = (TTT_STEPS,)
EAGLE_RECORDED = {"prefix_zero": 0.5, "match_depth1": False, "layout": None}

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
BLOCK_OPTIONS = (LAYOUT, PREFIX_ZERO, MATCH_DEPTH1)
JETFLOW_OPTIONS = (dataclasses.replace(LAYOUT, default="mask"), PREFIX_ZERO, MATCH_DEPTH1)
BLOCK_RECORDED = {"ttt_steps": None}
OLD_JETFLOW_LAYOUTS = {"causal": "packed", "bidirectional": "prefix"}  # what an unset layout meant before issue 52


def old_recipe(drafter: str | None, recipe: Mapping[str, Any]) -> str | None:
    """"old jetflow recipe (packed layout)" for a head trained under jetflow's default before issue 52
    (its recorded ``layout`` is unset), else None. ``recipe``: the head's ``training.config``."""
    if drafter != "jetflow" or "layout" not in recipe or recipe["layout"] is not None:
        return None
    return f"old jetflow recipe ({OLD_JETFLOW_LAYOUTS.get(recipe.get('head'), 'packed')} layout)"
