"""The ``accum`` construction (the JetSpec authors' rule) and the `jetflow` arm that uses it.

The reference below is written from the rule as the authors' README and code describe it, not
from jfbench's builder: a max-heap of nodes by cumulative log-prob (ties: the earlier-inserted node
first), popping a node adds its best min(K, budget - n) children from that depth's top-K, and a
node at the last drafted depth adds nothing.
"""

from __future__ import annotations

import heapq
import json
import math

import pytest
import torch
from safetensors.torch import save_file

from drafters import DRAFTERS
from drafters.tree_builder import ChildDist, TreeOptions, build_tree, child_dists, marginal_lookup
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.heads.head import DraftHead
from tests.helpers.heads import PROMPTS, head_config, observed_cache, save_target
from tests.helpers.trees import MARGINALS, check_invariants, dist, names

ACCUM = TreeOptions(construction="accum", fanout=2)


def reference_accum(root: int, logits: torch.Tensor, k: int, budget: int) -> tuple[list[int], list[int]]:
    """The authors' rule on per-depth logits (D, V) -> (tokens, parents); D = the depth cap."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    top_lp, top_tok = logp.topk(k, dim=-1)  # (D, k) each
    top_lp, top_tok = top_lp.tolist(), top_tok.tolist()
    tokens, parents, depth, cum = [root], [-1], [0], [0.0]
    heap = [(0.0, 0, 0)]  # (-cumulative log-prob, insertion counter, node)
    counter = 0
    while heap and len(tokens) < budget:
        neg, _, node = heapq.heappop(heap)
        d = depth[node]
        if d >= logits.shape[0]:
            continue
        for j in range(min(k, budget - len(tokens))):
            counter += 1
            heapq.heappush(heap, (neg - top_lp[d][j], counter, len(tokens)))
            tokens.append(top_tok[d][j])
            parents.append(node)
            depth.append(d + 1)
            cum.append(-neg + top_lp[d][j])
    return tokens, parents


def test_docstring_example():
    four = build_tree(0, marginal_lookup(MARGINALS), 4, ACCUM)
    assert names(four) == ["R", "a", "b", "d"]  # root adds a and b; a has room for one child only
    assert four.parents == [-1, 0, 0, 1]
    five = build_tree(0, marginal_lookup(MARGINALS), 5, ACCUM)
    assert names(five) == ["R", "a", "b", "d", "e"]  # a/e (.03) comes before b/d (.27): all of a's children
    assert five.parents == [-1, 0, 0, 1, 1]
    assert five.scores[4] == pytest.approx(math.log(0.6) + math.log(0.05))


def test_hand_built_tree_differs_from_best_first():
    #      R
    #    a   b            pop R: a, b
    #   d e               pop a: a/d, a/e
    #  f g                pop a/d: a/d/f, a/d/g (budget 7 full; b never popped)
    tree = build_tree(0, marginal_lookup(MARGINALS), 7, ACCUM)
    assert names(tree) == ["R", "a", "b", "d", "e", "f", "g"]
    assert tree.parents == [-1, 0, 0, 1, 1, 3, 3]
    check_invariants(tree, 7, ACCUM)
    best = build_tree(0, marginal_lookup(MARGINALS), 7, TreeOptions(construction="best-first", fanout=2))
    assert (ord("a"), ord("e")) not in {(best.tokens[best.parents[i]], best.tokens[i]) for i in range(1, 7)}


def test_ties_pop_the_earlier_node_first():
    even = ChildDist((1, 2), (math.log(0.5), math.log(0.5)))
    tree = build_tree(0, marginal_lookup([even, even]), 5, ACCUM)
    assert tree.parents == [-1, 0, 0, 1, 1]  # node 1 (added first) gets the children, not node 2


def test_depth_cap_pops_without_spending_budget():
    capped = build_tree(0, marginal_lookup(MARGINALS), 100, TreeOptions(construction="accum", fanout=3, max_depth=2))
    assert len(capped) == 1 + 3 + 3 * 2  # every level-1 node adds its 2 children; level-2 nodes add none
    assert max(capped.depths) == 2
    shallow = build_tree(0, marginal_lookup(MARGINALS[:1]), 100, TreeOptions(construction="accum", fanout=3))
    assert names(shallow) == ["R", "a", "b", "c"]  # no distribution below depth 1: nothing more


def test_overflow_takes_the_best_ranks():
    wide = dist(a=0.4, b=0.3, c=0.2, d=0.1)
    tree = build_tree(0, marginal_lookup([wide]), 3, TreeOptions(construction="accum", fanout=4))
    assert names(tree) == ["R", "a", "b"]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [1, 3, 7])
def test_matches_the_authors_rule_on_random_logits(seed, k):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(15, 50, generator=generator) * (1 + seed)  # (D, V): sharp and flat levels
    marginals = child_dists(logits, k)
    for budget in (1, 2, 7, 8, 16, 64, 255):
        tree = build_tree(9, marginal_lookup(marginals), budget, TreeOptions(fanout=k, max_depth=15))
        assert (tree.tokens, tree.parents) == reference_accum(9, logits, k, budget), budget


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> TargetRunner:
    return TargetRunner.load(save_target(tmp_path_factory.mktemp("target")), device="cpu")


@pytest.fixture(scope="module")
def released_jetspec_head(target, tmp_path_factory):
    """A causal head in the JetSpec release layout: no MASK tensor, ``causal_head`` flag, 'model.' prefix."""
    source = DraftHead(head_config(layers=2), target.embed, target.lm_head)
    source.init_weights(11)
    folder = tmp_path_factory.mktemp("jetspec")
    save_file({f"model.{k}": v for k, v in source.state_dict().items() if k != "mask_embedding"},
              str(folder / "model.safetensors"))
    config = {
        "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "vocab_size": 64,
        "num_target_layers": 2, "block_size": 8,
        "dflash_config": {"target_layer_ids": [0, 1], "mask_token_id": 5, "causal_head": True},
    }
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("budget", [8, 30, 64])
def test_released_head_in_jetflow_drafts_the_authors_tree(target, released_jetspec_head, budget):
    drafter = DRAFTERS.get("jetflow").build(target, released_jetspec_head)
    calls: list[torch.Tensor] = []
    logits_of = drafter.head.logits
    drafter.head.logits = lambda hidden: calls.append(logits_of(hidden)) or calls[-1]
    _, seqs = observed_cache(target, drafter.head)
    out = target.score(PROMPTS, taps=drafter.taps)
    drafter.reset(seqs)
    drafter.observe(seqs, [out.hidden[i, : len(p)] for i, p in enumerate(PROMPTS)])
    trees = drafter.propose(seqs, budget)
    assert len(calls) == 1, "released JetFlow drafts from pass 1 only (no refinement pass)"
    depth = 7  # block_size - 1 of the released config: the authors draft every block position
    assert drafter.tree.max_depth == depth
    per_row = calls[0].reshape(len(seqs), depth, -1)  # (B, D, V)
    for seq, tree, logits in zip(seqs, trees, per_row, strict=True):
        assert (tree.tokens, tree.parents) == reference_accum(seq.tokens[-1], logits, 7, budget)
    # budget 8 is the root plus its 7 children; larger budgets must go deeper than one level
    assert budget == 8 or any(max(t.depths) > 1 for t in trees)


def test_jetflow_refine_shares_the_checkpoint(target, released_jetspec_head):
    released = DRAFTERS.get("jetflow").build(target, released_jetspec_head)
    extension = DRAFTERS.get("jetflow-refine").build(target, released_jetspec_head)
    assert (released.refine_passes, released.tree.construction) == (0, "accum")
    assert (extension.refine_passes, extension.tree.construction) == (1, "best-first")
    assert released.info.path == extension.info.path and released.tree.fanout == extension.tree.fanout == 7
