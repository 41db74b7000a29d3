"""Briefly trained heads on the micro toy target, shared by the drafter and training tests.

`ensure_head` caches them by recipe, so they train once per cache folder (~1 min on 2 cores).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from jetflow_bench.training import QUICK_RECIPE, ensure_head
from tests.conftest import benchmark_data_dir


@pytest.fixture(scope="session")
def learned_heads(micro_target: Path) -> dict[str, Path]:
    return {  # on the made-up training sets where no data folder is given
        name: ensure_head(micro_target, name, data_dir=benchmark_data_dir(), device="cpu", show_progress=False, **QUICK_RECIPE)
        for name in ("eagle", "dflash", "jetflow")
    }
