"""FLOP estimates against a hand count on a small config."""

from torch import nn

from jetflow_bench.core.flops import TransformerShape
from jetflow_bench.engine.target import TargetRunner
from tests.helpers.random_models import random_model


def test_forward_flops_of_a_small_qwen3_by_hand():
    # hidden 64, MLP 128, 4 query heads and 2 KV heads of width 16, 2 layers, vocab 64 (tests/helpers/random_models).
    shape = TargetRunner(random_model("qwen3"), None, "random").shape
    per_layer = 64 * 64 + 64 * 32 + 64 * 32 + 64 * 64 + 3 * 64 * 128  # q, k, v, o, gate/up/down = 36,864
    assert shape == TransformerShape(layers=2, layer_params=per_layer, lm_head_params=64 * 64, q_heads=4, head_dim=16)
    # 3 tokens attending to 10 keys: 2·L·P·n + 4·L·H·d·n·k + 2·P_lm·n
    assert shape.forward_flops(3, 10) == 2 * 2 * 36_864 * 3 + 4 * 2 * 4 * 16 * 3 * 10 + 2 * 4096 * 3 == 482_304
    assert shape.forward_flops(3, 10, logit_rows=1) == 482_304 - 2 * 4096 * 2


def test_norm_scales_and_biases_are_not_matrices():
    layer = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8))
    assert TransformerShape.of([layer], nn.Linear(8, 5, bias=False), 1, 8).layer_params == 32
    assert TransformerShape.of([layer], nn.Linear(8, 5, bias=False), 1, 8).lm_head_params == 40
