"""The structural mask every attention backend receives, and the usage errors of `--attention`.

Fast (no kernel runs): the packed bits and dense forms on hand-written trees, and the one-line
errors for a backend that cannot run here.
"""

from __future__ import annotations

import sys

import pytest
import torch

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.attention import get_attention
from jetflow_bench.engine.tree import DraftTree, ancestor_mask, pad_trees
from jetflow_bench.heads.masks import block_allowed, context_allowed, join
from jetflow_bench.kernels.mask import TreeMask
from tests.helpers.data_dirs import benchmark_data_dir


def test_bits_pack_one_word_per_32_entries_with_bit_31_signed():
    entries = torch.zeros(1, 2, 33, dtype=torch.bool)
    entries[0, 0, [0, 2]] = True  # -> word 0 = 0b101
    entries[0, 1, [31, 32]] = True  # bit 31 of word 0 (sign bit), bit 0 of word 1
    mask = TreeMask(torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, dtype=torch.long), entries, 33, torch.float32)
    bits = mask.bits()
    assert bits.dtype == torch.int32 and bits.shape == (1, 2, 2)
    assert bits[0, 0].tolist() == [5, 0]
    assert bits[0, 1].tolist() == [-(2**31), 1]


def test_tree_mask_dense_form_is_prefix_plus_ancestors_at_each_rows_offset():
    # Module docstring's example (3 committed tokens, root -> {a, b}, a -> c) next to a row with 1.
    trees = [DraftTree([9, 1, 2, 3], [-1, 0, 0, 1]), DraftTree([9, 4], [-1, 0])]
    _, parents, depths, _ = pad_trees(trees)
    mask = TreeMask.for_tree(ancestor_mask(parents, depths), torch.tensor([3, 1]), 7, torch.float32)
    allowed = mask.allowed().int().tolist()
    assert allowed[0] == [
        [1, 1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 0],
        [1, 1, 1, 1, 0, 1, 0],  # b never sees its sibling a
        [1, 1, 1, 1, 1, 0, 1],
    ]
    assert allowed[1][:2] == [[1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0]]  # row 1's tree starts at slot 1
    additive = mask.additive()
    assert additive.shape == (2, 1, 4, 7) and additive[0, 0, 2, 4] == torch.finfo(torch.float32).min


def test_head_join_keeps_the_concatenated_mask():
    """join() used to build cat([context, entries]) directly; the structural mask must give the same."""
    context = context_allowed(torch.tensor([[2, 2, 5, 5], [0, 0, 3, 3]]), 6)  # (B, N, T) per-entry limits
    entries = block_allowed("causal", 2, 2)
    mask = join(context, entries, torch.float32)
    assert torch.equal(mask.allowed(), torch.cat([context, entries.expand(2, 4, 4)], dim=-1))
    assert mask.kv_len == 10 and mask.entry_start.tolist() == [6, 6]


def test_unknown_backend_is_a_usage_error():
    with pytest.raises(JfbenchError, match="unknown attention backend 'cudnn'"):
        get_attention("cudnn")


def test_triton_without_the_package_says_pip_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # `import triton` now raises ImportError
    with pytest.raises(JfbenchError, match="pip install triton"):
        get_attention("triton", "cpu")


def test_triton_on_cpu_without_the_interpreter_says_set_the_flag(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(JfbenchError, match="TRITON_INTERPRET=1"):
        get_attention("triton", "cpu")


def test_sweep_attention_triton_on_cpu_is_one_line_before_any_model_loads(cli, monkeypatch, tmp_path):
    pytest.importorskip("triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    # a hub id that cannot load: the attention check must fire before any model (or hub) is tried
    code, out, err = cli("sweep", "--target", "no-org/no-such-model", "--out", str(tmp_path / "run"),
                         "--device", "cpu", "--attention", "triton", "--data-dir", str(benchmark_data_dir()))
    assert code == 2 and out == ""
    assert err.startswith("error: ") and "TRITON_INTERPRET=1" in err and err.count("\n") == 1


def test_attention_backend_is_in_the_config_hash_except_the_default():
    """Runs made before --attention existed (sdpa) keep their hashes, so the CI reference still pairs;
    a kernel backend is a different config."""
    from dataclasses import replace

    from jetflow_bench.core.budget_policy import Budget
    from jetflow_bench.sweep.grid import DrafterSpec, SweepConfig, _identity, config_hash

    config = SweepConfig(target="org/model", drafters=(DrafterSpec("ngram"),), suites=("gsm8k",), budgets=(Budget.fixed(16),),
                         batch_sizes=(1,), repeats=1, device="cpu", dtype="float32", threads=1)
    assert "attention" not in _identity(config)
    assert config_hash(replace(config, attention="triton")) != config_hash(config)
