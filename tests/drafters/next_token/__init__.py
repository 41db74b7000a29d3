"""A drafter family from outside the package, as one folder: its record here, its modules beside it.

`tests/drafters/test_plugin_drafter.py` registers it with one line (`register_family(FAMILY)`), then trains,
sweeps, ablates and exports it like a built-in. Torch-free, as every family record (`--help` reads it).
"""

from jetflow_bench.plugins import Family
from jetflow_bench.plugins.ablation_axes import AblationAxes
from jetflow_bench.training.recipe import RecipeOption

NAME = "next-token"
GUESSES = RecipeOption("guesses", int, None, minimum=1, maximum=4, help="sibling guesses at depth 1 (default 1)")

FAMILY = Family(
    NAME,
    {NAME: "tests.drafters.next_token.drafter:NextTokenDrafter"},
    training="tests.drafters.next_token.drafter:NEXT_TOKEN_TRAINING",
    axes=AblationAxes((GUESSES,)),
    exports={"next-token-copy": "tests.drafters.next_token.drafter:export_copy"},
    colour="#000000",
)
