"""Tree-attention kernels against SDPA with the dense additive mask (the reference).

On a CPU these run Triton in its interpreter (TRITON_INTERPRET=1, set by conftest before Triton loads) and
FlexAttention eagerly: small shapes, a few minutes in all. Deselect them locally with
``-m "not interpreter"``; CI runs them. ``JFBENCH_TEST_DEVICE=cuda`` runs the same tests compiled on
a GPU (scripts/gpu_check.sh).
"""

from __future__ import annotations

import os

import pytest
import torch
from torch import nn

DEVICE = torch.device(os.environ.get("JFBENCH_TEST_DEVICE", "cpu"))  # conftest sets TRITON_INTERPRET=1 on cpu
triton = pytest.importorskip("triton")

from jetflow_bench.engine.attention import get_attention, sdpa_attention  # noqa: E402
from jetflow_bench.engine.tree import DraftTree, ancestor_mask, pad_trees  # noqa: E402
from jetflow_bench.heads.head import ConcatKV, DraftHead, HeadConfig  # noqa: E402
from jetflow_bench.heads.masks import block_allowed, context_allowed, join, tree_allowed  # noqa: E402
from jetflow_bench.kernels.mask import TreeMask  # noqa: E402
from tests.helpers.data_dirs import benchmark_data_dir  # noqa: E402

pytestmark = pytest.mark.interpreter
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-2}


def random_tree(n: int, gen: torch.Generator) -> DraftTree:
    return DraftTree([0] * n, [-1] + [int(torch.randint(0, i, (), generator=gen)) for i in range(1, n)])


# (committed prefix lengths per row, trees per row): ragged prefixes incl. 0 and 1, tree sizes
# 1, 2, 17, 64, random trees and chains, a row whose tree is only the root.
CASES = {
    "ragged-3-rows": ([0, 1, 70], lambda g: [random_tree(17, g), DraftTree.chain([0, 0]), DraftTree.root_only(0)]),
    "64-nodes": ([1, 130], lambda g: [random_tree(64, g), DraftTree.chain([0] * 64)]),
    "root-only": ([5], lambda g: [DraftTree.root_only(0)]),
}


def tree_inputs(case: str, heads: tuple[int, int], dtype: torch.dtype, head_dim: int = 32, seed: int = 0):
    """q, k, v on DEVICE in ``dtype``, the tree mask and valid (B, N): random values, keys past kv_len."""
    gen = torch.Generator().manual_seed(seed)
    lengths, make = CASES[case]
    _, parents, depths, valid = pad_trees(make(gen))
    b, n = parents.shape
    kv_len = max(lengths) + n
    mask = TreeMask.for_tree(ancestor_mask(parents, depths).to(DEVICE), torch.tensor(lengths, device=DEVICE), kv_len, dtype)
    hq, hkv = heads
    q = torch.randn(b, hq, n, head_dim, generator=gen).to(DEVICE, dtype)
    k = torch.randn(b, hkv, kv_len + 5, head_dim, generator=gen).to(DEVICE, dtype)[:, :, :kv_len]  # a strided view
    v = torch.randn(b, hkv, kv_len + 5, head_dim, generator=gen).to(DEVICE, dtype)[:, :, :kv_len]
    return q, k, v, mask, valid.to(DEVICE)


def reference(q, k, v, mask: TreeMask) -> torch.Tensor:
    """SDPA in fp32 on the same (already rounded) inputs."""
    fp32 = TreeMask(mask.prefix_lens, mask.entry_start, mask.entries, mask.kv_len, torch.float32)
    return sdpa_attention(q.float(), k.float(), v.float(), fp32, q.shape[-1] ** -0.5)


def max_error(out, ref, valid) -> float:
    assert not out.isnan().any()
    return float((out.float() - ref).abs()[valid[:, None, :, None].expand_as(ref)].max())


@pytest.mark.parametrize("tiles", [None, (32, 16)], ids=["default-tiles", "32x16-tiles"])
@pytest.mark.parametrize("heads", [(2, 2), (8, 2)], ids=["mha", "gqa4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("case", list(CASES))
def test_triton_tree_attention_equals_sdpa(case, dtype, heads, tiles):
    """Small tiles cross every phase boundary (full prefix tiles, partial ones, several entry words)."""
    from jetflow_bench.kernels.triton_tree import tree_attention

    q, k, v, mask, valid = tree_inputs(case, heads, dtype)
    out = tree_attention(q, k, v, mask, q.shape[-1] ** -0.5, *(tiles or ()))
    assert out.dtype == dtype and out.shape == q.shape
    assert max_error(out, reference(q, k, v, mask), valid) <= TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_flex_tree_attention_equals_sdpa(dtype):
    attend = get_attention("flex", DEVICE)
    for case in ("ragged-3-rows", "64-nodes"):
        q, k, v, mask, valid = tree_inputs(case, (8, 2), dtype)
        assert max_error(attend(q, k, v, mask, q.shape[-1] ** -0.5), reference(q, k, v, mask), valid) <= TOLERANCE[dtype]


@pytest.mark.parametrize("backend", ["triton", "flex"])
def test_a_query_that_sees_nothing_gets_zeros_not_nan(backend):
    """Per-query prefixes 40 and 3 share a 16-key tile, so tiles 16..40 are fully masked for some rows;
    one query sees no key at all. SDPA with dtype-min masks averages instead, so compare the rest."""
    from jetflow_bench.kernels.triton_tree import tree_attention

    gen = torch.Generator().manual_seed(1)
    n, t = 6, 48
    prefix = torch.tensor([[40, 40, 3, 3, 0, 17]], device=DEVICE)
    entries = torch.eye(n, dtype=torch.bool, device=DEVICE)[None].clone()
    entries[0, 4, 4] = False  # query 4: prefix 0 and no entry
    mask = TreeMask(prefix, torch.tensor([40], device=DEVICE), entries, 46, torch.float32)
    q, k, v = (torch.randn(1, 2, m, 16, generator=gen).to(DEVICE) for m in (n, t, t))
    if backend == "triton":
        out = tree_attention(q, k, v, mask, 0.25, 16, 16)
    else:
        out = get_attention("flex", DEVICE)(q, k, v, mask, 0.25)
    assert not out.isnan().any()
    assert out[0, :, 4].abs().max() == 0
    sees = torch.tensor([[True, True, True, True, False, True]], device=DEVICE)
    assert max_error(out, reference(q, k[:, :, :46], v[:, :, :46], mask), sees) <= 1e-5


# ------------------------------------------------------------------ the draft head's three masks
def tiny_head(mode: str) -> DraftHead:
    torch.manual_seed(0)
    cfg = HeadConfig(hidden_size=64, intermediate_size=128, num_layers=2, num_heads=8, num_kv_heads=2, head_dim=16,
                     taps=(0,), block_size=6, mode=mode)
    head = DraftHead(cfg, nn.Embedding(50, 64), nn.Linear(64, 50, bias=False)).to(DEVICE)
    head.init_weights(0)
    return head.eval()


def head_masks(b: int, t: int) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """(context (B, E, T), entries) for the three in-block modes, with ragged per-entry context limits."""
    trees = [DraftTree([0] * 6, [-1, 0, 0, 1, 3, 2]), DraftTree([0] * 4, [-1, 0, 1, 1])]
    _, parents, depths, _ = pad_trees(trees)
    limits = torch.tensor([[t, t, t, 9, 9, 9], [0, 0, 0, 1, 1, 1]])  # two blocks per row, anchors apart
    context = context_allowed(limits.to(DEVICE), t)
    return {
        "causal": (context, block_allowed("causal", 2, 3, DEVICE)),
        "bidirectional": (context, block_allowed("bidirectional", 2, 3, DEVICE)),
        "tree": (context, tree_allowed(parents.to(DEVICE), depths.to(DEVICE))),
    }


@pytest.mark.parametrize("mode", ["causal", "bidirectional", "tree"])
def test_draft_head_masks_through_the_kernel_equal_sdpa(mode, monkeypatch):
    import jetflow_bench.kernels.triton_tree as kernel

    calls = []
    original = kernel.tree_attention
    monkeypatch.setattr(kernel, "tree_attention", lambda *a, **kw: calls.append(1) or original(*a, **kw))
    head = tiny_head("bidirectional" if mode == "bidirectional" else "causal")
    b, t, e = 2, 21, 6
    gen = torch.Generator().manual_seed(2)
    fused = torch.randn(b, t, 64, generator=gen).to(DEVICE)
    context_kv = head.context_kv(fused, torch.arange(t, device=DEVICE).expand(b, t))
    x = torch.randn(b, e, 64, generator=gen).to(DEVICE)
    positions = (torch.arange(e, device=DEVICE) + 9).expand(b, e)
    mask = join(*head_masks(b, t)[mode], x.dtype)
    outs = {}
    with torch.inference_mode():
        for backend in ("sdpa", "triton"):
            head.attend = get_attention(backend, DEVICE)
            outs[backend] = head(x, positions, mask, ConcatKV(context_kv))  # (B, E, H)
    assert len(calls) == head.cfg.num_layers  # the head really attended through the kernel
    assert (outs["triton"] - outs["sdpa"]).abs().max() <= 1e-5


# ------------------------------------------------------------------ end to end
def test_bench_kernels_on_cpu_prints_errors_and_says_timings_are_meaningless(cli):
    if DEVICE.type != "cpu":
        pytest.skip("the CPU wording")
    code, out, err = cli("bench", "kernels", "--tree-sizes", "5", "--prefix-lens", "1,40", "--batch-sizes", "2",
                         "--heads", "4,2,16", "--device", "cpu", "--format", "json")
    assert code == 0, err
    import json

    rows = json.loads(out)
    assert {r["backend"] for r in rows} == {"sdpa", "triton", "flex"} and len(rows) == 6
    assert max(r["max_err"] for r in rows) <= 1e-5
    assert all(r["ms"] is None for r in rows)  # no interpreter timings reported
    code, out, err = cli("bench", "kernels", "--tree-sizes", "3", "--prefix-lens", "4", "--batch-sizes", "1",
                         "--heads", "2,1,16", "--device", "cpu", "--backends", "sdpa,triton")
    assert code == 0 and "meaningless" in err and "triton" in out


@pytest.mark.slow
def test_micro_target_sweep_with_triton_gives_the_sdpa_tokens(cli, micro_target, learned_heads, tmp_path, monkeypatch):  # noqa: F811
    """Target verification AND the JetFlow head (causal block + tree-causal refinement) through the kernel."""
    import sys

    import pandas as pd

    import jetflow_bench.kernels.triton_tree as kernel

    callers: set[str] = set()
    original = kernel.tree_attention

    def counted(*args, **kwargs):
        callers.add(os.path.basename(sys._getframe(1).f_code.co_filename))  # target.py or head.py
        return original(*args, **kwargs)

    monkeypatch.setattr(kernel, "tree_attention", counted)
    outputs = {}
    for backend in ("sdpa", "triton"):
        out = tmp_path / backend
        code, _, err = cli("sweep", "--target", str(micro_target), "--out", str(out), "--device", DEVICE.type,
                           "--drafters", f"jetflow={learned_heads['jetflow']}", "--suites", "gsm8k", "--budgets", "8",
                           "--limit", "2", "--max-new-tokens", "10", "--repeats", "1", "--threads", "1",
                           "--attention", backend, "--data-dir", str(benchmark_data_dir()), "--no-progress")
        assert code == 0, err
        requests = pd.read_parquet(out / "requests.parquet")
        outputs[backend] = requests.set_index(["drafter", "request"])["output_ids"].map(list).to_dict()
        drafted = requests.set_index("drafter").loc["jetflow"]
        assert drafted["accepted"].sum() > 0  # drafts were accepted, so the head's outputs mattered
    assert callers == {"target.py", "head.py"}  # both really ran the kernel
    assert outputs["triton"] == outputs["sdpa"]
    assert len(outputs["sdpa"]) == 4  # AR + jetflow, 2 prompts each
