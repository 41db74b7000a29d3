"""Names every module agrees on for the arms of a comparison.

The plain autoregressive baseline is an arm like any other: the same engine with no drafter,
budget 1. Its name lives here, once; every table, plot, check and store asks for it.
"""

AR_ARM = "ar"

# How a drafter arm is written on the command line (`sweep --drafters`, `ablate --drafter`); options
# that differ from the drafter's defaults become part of the arm's name, e.g. eagle[depth=15].
ARM_SYNTAX = "NAME, NAME=CHECKPOINT_DIR or NAME[KEY=VALUE,...]=CHECKPOINT_DIR"
