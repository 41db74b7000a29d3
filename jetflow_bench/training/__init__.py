"""Draft-head training: data (regen / raw), losses, block and EAGLE objectives, the resumable loop.

Public entry points: `train_drafter` (train into a folder) and `ensure_head` (cached by recipe).
"""

from jetflow_bench.training.cache import QUICK_RECIPE, ensure_head, head_path
from jetflow_bench.training.config import TrainConfig
from jetflow_bench.training.loop import train_drafter

__all__ = ["QUICK_RECIPE", "TrainConfig", "ensure_head", "head_path", "train_drafter"]
