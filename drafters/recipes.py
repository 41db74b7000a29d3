"""The recipe fields the built-in families declare for their heads (no torch: `--help` reads them).

Each tuple is a family's `RecipeOption`s: its `TrainingObjective` (``drafters/eagle_training.py``,
``drafters/block_training.py``) reads and checks them, and `drafters/__init__.py` registers them
under the family's name in `jetflow_bench.training.recipe.RECIPES`. ``*_RECORDED``: fields heads
of the family wrote into their recipe before families owned their fields, at the values every
such head had; they stay in its recipe record so cached heads keep their cache keys.
"""

from jetflow_bench.training.recipe import RecipeOption

TTT_STEPS = RecipeOption(
    "ttt_steps", int, None, minimum=1,
    help="training-time-test steps (own features fed back); default the drafted depth, block size - 1 "
         "(EAGLE-3 trains every step it drafts)",
)
EAGLE_OPTIONS = (TTT_STEPS,)
EAGLE_RECORDED = {"prefix_zero": 0.5, "match_depth1": False, "layout": None}

LAYOUT = RecipeOption(
    "layout", str, None, choices=("prefix", "packed"),
    help="training blocks: packed (true path + a MASK query per node, every prefix length at once; jetflow, "
         "causal head) or prefix (one random-length real prefix, then masks); default packed for a causal "
         "jetflow head, else prefix",
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
BLOCK_RECORDED = {"ttt_steps": None}
