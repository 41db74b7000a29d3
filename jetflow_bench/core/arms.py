"""Names every module agrees on for the arms of a comparison.

The plain autoregressive baseline is an arm like any other: the same engine with no drafter,
budget 1. Its name lives here, once; every table, plot, check and store asks for it.
"""

AR_ARM = "ar"
DEFAULT_VARIANT = "default"  # the variant of an arm run with the drafter's own settings
ARM_KEYS = ["suite", "drafter", "variant", "budget", "batch_size", "temperature", "load"]  # a cell's keys less the repeat


def arm_label(drafter: str, variant: str) -> str:
    """How tables and messages name an arm: ``eagle``, or ``eagle[depth=15]`` for a variant."""
    return drafter if variant == DEFAULT_VARIANT else f"{drafter}[{variant}]"


HEAD_RECORDS = "heads"  # a run folder's copies of its arms' head records; a published baseline's folder of them


def head_record_file(drafter: str, variant: str) -> str:
    """The name an arm's head record (the head's config.json) is kept under in a `HEAD_RECORDS` folder."""
    return f"{drafter if variant == DEFAULT_VARIANT else f'{drafter}-{variant}'}.config.json"


# How a drafter arm is written on the command line (`sweep --drafters`, `ablate --drafter`); options
# that differ from the drafter's defaults become part of the arm's name, e.g. eagle[depth=15].
ARM_SYNTAX = "NAME, NAME=CHECKPOINT_DIR or NAME[KEY=VALUE,...]=CHECKPOINT_DIR"
