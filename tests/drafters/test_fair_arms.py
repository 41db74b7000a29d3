"""Fair arms: every learned arm drafts to the same depth by default, and EAGLE trains what it drafts."""

from __future__ import annotations

import pytest

from drafters import DRAFTERS
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.training.config import train_config


def test_eagle_depth_cap_is_the_block_heads_depth(target, checkpoints):  # noqa: F811
    eagle = DRAFTERS.get("eagle").build(target, checkpoints["eagle"])
    block = DRAFTERS.get("jetflow").build(target, checkpoints["jetflow"])
    assert eagle.tree.max_depth == block.tree.max_depth == 7  # block_size 8 - 1 for both recipes
    assert eagle.tree.construction == "frontier"  # EAGLE-2: top_k per depth, then the best explored nodes
    shallow = DRAFTERS.get("eagle").build(target, checkpoints["eagle"], depth=4)
    assert shallow.tree.max_depth == 4 and "max_depth" not in type(shallow).option_defaults()  # one name per cap


def test_eagle_trains_as_many_test_steps_as_it_drafts():
    assert train_config("eagle").setting("ttt_steps") == 15  # default block size 16 -> depth 15
    assert train_config("eagle", block_size=8).setting("ttt_steps") == 7
    assert train_config("eagle", ttt_steps=3).setting("ttt_steps") == 3
    assert train_config("jetflow").setting("ttt_steps") is None  # block heads have no test steps
    # an explicit value equal to the default is the same recipe (same cached head)
    assert train_config("eagle", ttt_steps=15).key("t") == train_config("eagle").key("t")
    with pytest.raises(JfbenchError, match="ttt-steps"):
        train_config("eagle", ttt_steps=0)
