"""The EAGLE family (EAGLE and EAGLE-3 drafting, one objective): its record, torch-free (`--help` reads it).

Modules: `drafter` (the tree drafters), `eagle3` (the EAGLE-3 head format and its export),
`training` (the objective). ``EAGLE_RECORDED``: fields its heads wrote into their recipe before
families owned their fields, at the values every such head had; they stay in its recipe record so
cached heads keep their cache keys.
"""

from drafters.axes import TREE_AXES
from jetflow_bench.plugins import Family
from jetflow_bench.training.recipe import RecipeOption

TTT_STEPS = RecipeOption(
    "ttt_steps", int, None, minimum=1,
    help="training-time-test steps (own features fed back); default the drafted depth, block size - 1 "
         "(EAGLE-3 trains every step it drafts)",
)
EAGLE_RECORDED = {"prefix_zero": 0.5, "match_depth1": False, "layout": None}

FAMILY = Family(
    "eagle",
    {"eagle": "drafters.eagle.drafter:EagleDrafter", "eagle3": "drafters.eagle.drafter:Eagle3Drafter"},
    training="drafters.eagle.training:EAGLE_TRAINING",
    recipe=(TTT_STEPS,),
    axes=TREE_AXES,
    exports={"eagle3": "drafters.eagle.eagle3:export_eagle3"},  # vLLM method "eagle3", SpecForge, SGLang
    colour="#0072b2",  # blue
)
