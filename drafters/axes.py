"""What the built-in drafters declare for `jfbench ablate` (no torch: `--help` reads it).

Drafting options: the tree drafters' scoring and construction (`drafters/tree_builder.py`, which
reads its choices from here) and JetFlow's refinement passes (`drafters/block/jetflow.py`). Common
settings: heads trained in blocks (`drafters/block/training.py`) learn a bidirectional mask or
``match_depth1`` only with the prefix layout, and JetFlow's tree-causal refinement reads paths a
bidirectional head never sees. The family records (`drafters/eagle/__init__.py`,
`drafters/block/__init__.py`) name them as their `Family.axes`.
"""

from jetflow_bench.plugins.ablation_axes import AblationAxes, CommonSetting
from jetflow_bench.training.recipe import RecipeOption

SCORINGS = ("logp", "entropy")
CONSTRUCTIONS = ("accum", "best-first", "spine-first", "frontier")

SCORING = RecipeOption(
    "scoring", str, None, choices=SCORINGS,
    help="tree scoring: cumulative draft log-prob, or entropy (log-prob minus gamma x entropy; not with --budgets auto)",
)
CONSTRUCTION = RecipeOption(
    "construction", str, None, choices=CONSTRUCTIONS, help="how the tree grows; default the drafter's own",
)
REFINE_PASSES = RecipeOption(
    "refine_passes", int, None, minimum=0,
    help="tree-causal refinement passes after pass 1; default the drafter's own (jetflow-refine refines)",
)

LAYOUT_OF_BIDIRECTIONAL = CommonSetting(  # the mask layout (jetflow's default) trains either head
    ("head", "bidirectional"), "train", "layout", "prefix", "the packed training layout needs a causal head",
    conflicts=("packed",))
LAYOUT_OF_MATCH_DEPTH1 = CommonSetting(
    ("match_depth1", True), "train", "layout", "prefix", "the packed layout already gives every depth-1 query",
    conflicts=("packed",))
NO_REFINING_BIDIRECTIONAL = CommonSetting(
    ("head", "bidirectional"), "infer", "refine_passes", 0,
    "tree-causal refinement reads paths a bidirectional head never sees")

TREE_AXES = AblationAxes((SCORING, CONSTRUCTION))
BLOCK_AXES = AblationAxes((SCORING, CONSTRUCTION), (LAYOUT_OF_MATCH_DEPTH1, LAYOUT_OF_BIDIRECTIONAL))
JETFLOW_AXES = AblationAxes(
    (REFINE_PASSES, SCORING, CONSTRUCTION),
    (LAYOUT_OF_MATCH_DEPTH1, LAYOUT_OF_BIDIRECTIONAL, NO_REFINING_BIDIRECTIONAL),
)
