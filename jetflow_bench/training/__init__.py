"""Draft-head training: data (regen / raw), teacher, losses, the objective contract (objective.py), the resumable loop.

Public entry points: `train_drafter` (train into a folder), `ensure_head` (cached by recipe) and
`train_config` (a recipe, built by its family's objective).
They load on first access, so `jetflow_bench.training.config` (recipe fields, no torch) imports
cheaply — the CLI reads its defaults for `--help`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jetflow_bench.training.cache import QUICK_RECIPE, ensure_head, head_path
    from jetflow_bench.training.config import TrainConfig, train_config
    from jetflow_bench.training.loop import train_drafter

_HOMES = {
    "QUICK_RECIPE": "cache", "ensure_head": "cache", "head_path": "cache", "TrainConfig": "config",
    "train_config": "config", "train_drafter": "loop",
}
__all__ = ["QUICK_RECIPE", "TrainConfig", "ensure_head", "head_path", "train_config", "train_drafter"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
