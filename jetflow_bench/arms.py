"""Names every module agrees on for the arms of a comparison.

The plain autoregressive baseline is an arm like any other: the same engine with no drafter,
budget 1. Its name lives here, once; every table, plot, check and store asks for it.
"""

AR_ARM = "ar"
