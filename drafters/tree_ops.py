"""Draft-tree construction as batched tensor operations on the head's device (the drafters' hot path).

It builds the trees `drafters.tree_builder.build_tree` builds (that pure-Python builder stays as the
reference the tests compare with): same nodes, same order, same float64 scores, for ``accum``,
``best-first`` and ``spine-first``, for every row of a batch at once, with no Python loop over
nodes and no host transfer until `TreeBatch.to_trees`.

Why a heap is not needed. Scores only fall along a path (every increment log q - gamma * H is
<= 0), so each construction's pop sequence is a prefix of ONE order over all reachable nodes:
descending score, exact ties as the reference's heap breaks them (accum: the node added earlier,
i.e. the earlier parent pop, then the lower rank; best-first: the candidate pushed earlier, i.e.
its predecessor — previous sibling, or parent for a first child — popped earlier, the sibling push
before the child push).

- best-first: the tree is root + the first B - 1 nodes of that order.
- frontier: the same over the explored nodes only. A stage keeps every child of the previous
  stage's frontier (``top_k`` x K nodes), and only its first ``top_k`` live nodes, the stage's
  frontier, have children at the next depth.
- spine-first: the greedy chain (rank-0 child at every depth) first, then the order's first
  nodes among the rest.
- accum: the popped nodes are the order's first nodes among those that *have* children (a node at
  the depth cap, or without a distribution, is popped but adds nothing); pop i adds all its K
  children at positions 1 + i*K + rank, until the budget is full.

Every node of that prefix at depth d has its parent in the prefix, so it is found depth by depth:
stage d ranks the children of the nodes kept at depth d - 1 and keeps the best ``B - 1`` (accum:
``ceil((B - 1) / K)``, the most pops it can make; accum pops lie above depth ceil((B - 1) / K)).
One stage per depth, then one sort of all kept nodes. The tie order is defined through itself, so
`_refine` reaches it by re-sorting (`_TIE_ROUNDS` rounds): exact for ties that involve a parent, a
child or siblings, and for accum generally; when unrelated branches tie in long chains (a 3-value
logit grid, tested) best-first and spine-first may order tied nodes differently, always keeping the
same multiset of scores (a k-best tree either way).

Host syncs: none on an accelerator until `TreeBatch.to_trees` (one transfer). On the CPU, where a
check costs nothing, two exact shortcuts read a bool: skip the tie rounds when no two keys are
equal, and stop adding depths once no child can beat the nodes already kept.

Where children come from:
- ``marginals`` (`Dists` with one slot per depth): every node at depth d gets slot d (DFlash-T,
  JetFlow pass 1);
- ``known`` (`KnownNodes`): distributions attached to explicit paths (JetFlow's branch-conditioned
  children, EAGLE's explored frontier); a node found there uses its own, any other node falls back
  to the marginals when given, else has no children.

Worked example (fanout 2, marginals q1 = {a: .6, b: .3}, q2 = {c: .9, d: .05}, budget 4):
    stage 1 keeps a (-0.51), b (-1.20); stage 2 ranks a/c (-0.62), b/c (-1.31), a/d, b/d
    best-first: order a, a/c, b, ...  -> root, a, a/c, b
    accum:      pops root, a          -> root, a, b (root's children), a/c (a's first child)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from drafters.tree_builder import TreeOptions
from drafters.tree_host import build_trees_on_host, host_trees
from drafters.tree_tensors import Dists, KnownNodes, TreeBatch
from jetflow_bench.engine.tree import DraftTree

_TIE_ROUNDS = 2  # re-sorts that settle chains of exact score ties (see `_refine`)


def host_checks_are_free(device: torch.device) -> bool:
    """Whether reading a tensor on the host is cheap on ``device``: on a CPU it costs no device sync,
    so the builder may stop early or skip tie rounds; on an accelerator every such check is a sync.
    (One predicate, so that a CPU test can take the accelerator's branches.)"""
    return device.type == "cpu"


@dataclass
class _Stage:
    """The nodes kept at one depth, best first."""

    score: torch.Tensor  # (R, L) float64
    ok: torch.Tensor  # (R, L) bool
    token: torch.Tensor  # (R, L)
    parent: torch.Tensor  # (R, L) global index of the parent (root = 0)
    rank: torch.Tensor  # (R, L) rank among its parent's children
    known: torch.Tensor | None  # (R, L) trie index or -1; None without known nodes
    chain: torch.Tensor | None  # (R, L) bool, on the greedy spine; None unless spine-first
    expand: torch.Tensor | None  # (R, L) bool, in this depth's frontier; None unless frontier


class _Source:
    """Children distributions for the nodes of a stage, from marginals and/or known nodes."""

    def __init__(self, options: TreeOptions, marginals: Dists | None, known: KnownNodes | None) -> None:
        self.options, self.marginals, self.known = options, marginals, known
        self.k = min(options.fanout, (marginals or known.dists).k)  # type: ignore[union-attr]
        self.entropy = options.scoring == "entropy"
        k = self.k
        if marginals is not None:  # converted once, not per stage
            self.m_tokens, self.m_logps = marginals.tokens[..., :k], marginals.logps[..., :k].double()
            self.m_penalty = options.entropy_weight * marginals.entropy.double() if self.entropy else None
            self.m_depth = marginals.tokens.shape[1]
        if known is not None:
            self.k_tokens, self.k_logps = known.dists.tokens[..., :k], known.dists.logps[..., :k].double()
            self.k_penalty = options.entropy_weight * known.dists.entropy.double() if self.entropy else None

    def marginal_at(self, depth: int) -> bool:
        return self.marginals is not None and depth < self.m_depth

    def children(self, stage: _Stage, depth: int):
        """tokens (R, L|1, K), logps (R, L|1, K) f64, penalty (R, L|1) or None, has (R, L)."""
        if depth >= self.options.max_depth:
            return None
        marginal = self.marginal_at(depth)
        if self.known is None:
            if not marginal:
                return None
            pen = self.m_penalty[:, depth, None] if self.entropy else None
            return self.m_tokens[:, depth, None], self.m_logps[:, depth, None], pen, stage.ok
        r, n = stage.ok.shape
        slot = stage.known.clamp(min=0)  # (R, L)
        own = (stage.known >= 0) & self.known.has_dist.gather(1, slot)
        pick = slot[..., None].expand(r, n, self.k)
        tokens, logps = self.k_tokens.gather(1, pick), self.k_logps.gather(1, pick)
        pen = self.k_penalty.gather(1, slot) if self.entropy else None
        if marginal:
            tokens = torch.where(own[..., None], tokens, self.m_tokens[:, depth, None])
            logps = torch.where(own[..., None], logps, self.m_logps[:, depth, None])
            if self.entropy:
                pen = torch.where(own, pen, self.m_penalty[:, depth, None])
            return tokens, logps, pen, stage.ok
        return tokens, logps, pen, stage.ok & own

    def expandable(self, depth: int, known_id: torch.Tensor | None) -> torch.Tensor | bool:
        """Would a node at ``depth`` (trie index ``known_id``) have children? (R, C) or a constant."""
        if depth >= self.options.max_depth:
            return False
        if self.marginal_at(depth):
            return True
        if self.known is None:
            return False
        slot = known_id.clamp(min=0).reshape(known_id.shape[0], -1)
        return (known_id >= 0) & self.known.has_dist.gather(1, slot).view_as(known_id)


def _sort_key(score: torch.Tensor, live: torch.Tensor, chain: torch.Tensor | None) -> torch.Tensor:
    """Ascending key: spine nodes first, then descending score; dead entries last (NaN sorts last)."""
    key = torch.where(live, -score, math.nan)
    return key if chain is None else torch.where(chain, -math.inf, key)


def on_host(options: TreeOptions, roots: torch.Tensor) -> bool:
    """Whether trees are built by the reference builder on the host (``builder=auto``: on a CPU)."""
    return options.builder == "host" or (options.builder == "auto" and roots.device.type == "cpu")


def draft_trees(
    roots: torch.Tensor, budget: int, options: TreeOptions, marginals: Dists | None = None,
    known: KnownNodes | None = None,
) -> list[DraftTree]:
    """``build_trees(...).to_trees()``, without packing host-built trees into tensors nobody reads."""
    if on_host(options, roots) and (marginals is not None or known is not None):  # neither: build_trees refuses
        return host_trees(roots, budget, options, marginals, known)[0]
    return build_trees(roots, budget, options, marginals, known).to_trees()


def build_trees(
    roots: torch.Tensor,
    budget: int,
    options: TreeOptions,
    marginals: Dists | None = None,
    known: KnownNodes | None = None,
) -> TreeBatch:
    """Trees of at most ``budget`` nodes (root included) for roots (R,); see the module docstring.

    ``options.builder`` picks the implementation: these tensor ops, or the reference builder on
    the host (`drafters.tree_host`, the faster one on a CPU; ``auto`` = host on a CPU).
    """
    if marginals is None and known is None:
        raise ValueError("build_trees needs marginals, known nodes or both")
    if on_host(options, roots):
        return build_trees_on_host(roots, budget, options, marginals, known)
    r, device = roots.shape[0], roots.device
    accum = options.construction == "accum"
    spine = options.construction == "spine-first"
    frontier = options.construction == "frontier"
    source = _Source(options, marginals, known)
    k = source.k
    pops = -(-(budget - 1) // k)  # accum: the most pops that add children
    keep = pops if accum else options.top_k * k if frontier else budget - 1  # nodes a stage keeps
    # Deepest stage: accum pops sit at depth < pops (each has its ancestors popped before it);
    # the other constructions keep nodes down to the depth cap, B - 1 at most.
    last = min(options.max_depth - 1, pops - 1) if accum else min(options.max_depth, budget - 1)
    zeros = torch.zeros(r, 1, dtype=torch.long, device=device)
    stage = _Stage(
        torch.zeros(r, 1, dtype=torch.float64, device=device), torch.ones(r, 1, dtype=torch.bool, device=device),
        roots[:, None], zeros - 1, zeros, zeros if known is not None else None,
        torch.ones(r, 1, dtype=torch.bool, device=device) if spine else None,
        torch.ones(r, 1, dtype=torch.bool, device=device) if frontier else None,
    )
    stages, dists = [stage], []
    offset = 1  # global index of the next stage's first node
    cpu = host_checks_are_free(device)
    for depth in range(max(last, 0) + (1 if accum else 0)):
        found = source.children(stage, depth)
        if found is None:
            break
        tokens, logps, penalty, has = found
        if frontier:  # only the frontier has children
            has = has & stage.expand
        dists.append(found)
        if depth == last:  # accum: the deepest pops' children are leaves, no stage for them
            break
        n = stage.ok.shape[1]
        score = stage.score[..., None] + logps  # (R, L, K)
        if penalty is not None:
            score = score - penalty[..., None]  # (parent + log q) - gamma H, as `child_score` adds
        if cpu and not (spine or frontier) and len(stages) > 1 and _beyond_reach(stages, score, has, keep):
            break
        live = has[..., None] if accum else has[..., None] & torch.isfinite(logps)  # (R, L, K)
        child_known = (
            known.lookup(stage.known[..., None].expand(r, n, k).reshape(r, -1),
                         tokens.expand(r, n, k).reshape(r, -1)).view(r, n, k)
            if known is not None else None
        )
        if accum:  # only nodes that will add children are pops
            live = live & source.expandable(depth + 1, child_known)
        chain = None
        if spine:
            chain = stage.chain[..., None] & has[..., None] & (torch.arange(k, device=device) == 0)
            live = live | chain
        live = live.expand(r, n, k)
        key = _sort_key(score, live, chain).reshape(r, -1)  # (R, L*K), laid out (parent order, rank)
        order = key.sort(dim=-1, stable=True).indices[:, :keep]  # (R, L')
        rank = order % k
        parent_local = order // k
        token = (tokens.expand(r, n, k).reshape(r, -1).gather(1, order) if tokens.shape[1] > 1
                 else tokens[:, 0].gather(1, rank))
        ok = live.reshape(r, -1).gather(1, order)  # live nodes sort first
        stage = _Stage(
            score.reshape(r, -1).gather(1, order), ok, token, (offset - n) + parent_local, rank,
            child_known.reshape(r, -1).gather(1, order) if known is not None else None,
            chain.reshape(r, -1).gather(1, order) if spine else None,
            ok & (torch.arange(ok.shape[1], device=device) < options.top_k) if frontier else None,
        )
        stages.append(stage)
        offset += order.shape[1]
    sizes = [s.ok.shape[1] for s in stages]
    depth_of = torch.repeat_interleave(  # (R, G); output_size given: no device sync
        torch.arange(len(stages), device=device), torch.tensor(sizes, device=device), output_size=sum(sizes)
    ).expand(r, -1)
    cat = {f: None if getattr(stage, f) is None else torch.cat([getattr(s, f) for s in stages], dim=1)
           for f in _Stage.__dataclass_fields__}
    if accum:
        return _accum(cat, depth_of, _stack_dists(dists, sizes, k), budget, k, known)
    return _ordered(cat, depth_of, budget, k)


def _beyond_reach(stages: list[_Stage], score: torch.Tensor, has: torch.Tensor, keep: int) -> bool:
    """True when no child of this stage can still be chosen: all score below the ``keep``-th best
    node kept so far (descendants score lower still). Exact, so it only saves stages (CPU only:
    it reads one bool on the host)."""
    kept = torch.cat([torch.where(s.ok, s.score, -math.inf) for s in stages[1:]], dim=1)  # (R, G)
    if kept.shape[1] < keep:
        return False
    bar = kept.topk(keep, dim=1).values[:, -1:]  # (R, 1)
    best = torch.where(has[..., None], score, -math.inf).flatten(1).max(dim=1, keepdim=True).values
    return not bool((best >= bar).any())


def _stack_dists(dists: list, widths: list[int], k: int) -> tuple[torch.Tensor, ...]:
    """Per-stage children distributions -> tokens (R, G, k), logps (R, G, k), penalty (R, G), has (R, G);
    stages past the last distribution have no children."""
    r = dists[0][3].shape[0]
    device = dists[0][3].device
    parts: list[list[torch.Tensor]] = [[], [], [], []]
    for i, w in enumerate(widths):
        if i < len(dists):
            tokens, logps, penalty, has = dists[i]
            parts[0].append(tokens.expand(r, w, k))
            parts[1].append(logps.expand(r, w, k))
            parts[2].append(torch.zeros(r, w, dtype=torch.float64, device=device) if penalty is None
                            else penalty.expand(r, w))
            parts[3].append(has)
        else:
            parts[0].append(torch.zeros(r, w, k, dtype=torch.long, device=device))
            parts[1].append(torch.zeros(r, w, k, dtype=torch.float64, device=device))
            parts[2].append(torch.zeros(r, w, dtype=torch.float64, device=device))
            parts[3].append(torch.zeros(r, w, dtype=torch.bool, device=device))
    return tuple(torch.cat(p, dim=1) for p in parts)


def _ordered(cat: dict, depth_of: torch.Tensor, budget: int, k: int) -> TreeBatch:
    """best-first / spine-first: root + the first ``budget - 1`` kept nodes in key order."""
    r, g = depth_of.shape
    device = depth_of.device
    primary = _sort_key(cat["score"], cat["ok"], cat["chain"])
    primary[:, 0] = -math.inf  # the root first

    def predecessor() -> tuple[torch.Tensor, torch.Tensor]:
        # The heap's tie-break: a candidate is pushed when its predecessor pops (the previous sibling,
        # or the parent for a first child), the sibling push before the child push of the same pop.
        slots = torch.full((r, g * k + 1), -1, dtype=torch.long, device=device)  # (parent, rank) -> index
        at = torch.where(cat["parent"] >= 0, cat["parent"] * k + cat["rank"], g * k)
        slots.scatter_(1, at, torch.arange(g, device=device).expand(r, g))
        sibling = slots.gather(1, torch.where(cat["rank"] > 0, at - 1, g * k))
        pred = torch.where(cat["rank"] > 0, sibling, cat["parent"]).clamp(min=0)
        return pred, (cat["rank"] == 0).long()

    order = _refine(primary, predecessor, 2)[:, :budget]  # (R, N) global indices
    position = torch.zeros(r, g, dtype=torch.long, device=device)
    position.scatter_(1, order, torch.arange(order.shape[1], device=device).expand_as(order))
    valid = cat["ok"].gather(1, order)
    parents = torch.where(valid, position.gather(1, cat["parent"].clamp(min=0).gather(1, order)), -1)
    parents[:, 0] = -1
    known_ids = cat["known"].gather(1, order) if cat["known"] is not None else torch.full_like(order, -1)
    return TreeBatch(cat["token"].gather(1, order), parents, depth_of.gather(1, order),
                     cat["score"].gather(1, order), valid, known_ids)


def _refine(primary: torch.Tensor, predecessor, span: int) -> torch.Tensor:
    """Order (R, G) by ``primary``, equal keys by the position of a predecessor in that same order,
    then a tie value; ``predecessor()`` -> (pred (R, G) index, tie (R, G) in [0, span)).

    The order is defined through itself (a predecessor sorts before its successors), so it is
    reached by re-sorting: each round settles one more link of a chain of exact ties; stable sorts
    keep the stage order (depth, parent order, rank) for what is left. Without exact ties there is
    nothing to settle: on the CPU (where a check costs no device sync) the rounds are skipped then.
    """
    ordered = primary.sort(dim=-1, stable=True)
    order = ordered.indices
    if order.shape[1] < 2:
        return order
    if host_checks_are_free(primary.device):
        keys = ordered.values
        if not bool(((keys[:, 1:] == keys[:, :-1]) & torch.isfinite(keys[:, 1:])).any()):
            return order
    pred, tie = predecessor()
    ar = torch.arange(primary.shape[1], device=primary.device).expand_as(order)
    for _ in range(_TIE_ROUNDS):
        position = torch.empty_like(order).scatter_(1, order, ar)
        secondary = position.gather(1, pred) * span + tie
        by_secondary = secondary.sort(dim=-1, stable=True).indices
        order = by_secondary.gather(1, primary.gather(1, by_secondary).sort(dim=-1, stable=True).indices)
    return order


def _accum(cat: dict, depth_of: torch.Tensor, dists: tuple, budget: int, k: int, known: KnownNodes | None) -> TreeBatch:
    """accum: pops in key order among expandable nodes; pop i's children fill 1 + i*k + rank."""
    r, g = depth_of.shape
    device = depth_of.device
    tokens, logps, penalty, has = dists  # (R, G, k), (R, G, k), (R, G), (R, G)
    pops_max = -(-(budget - 1) // k)
    live = cat["ok"] & has  # (R, G) expandable, the root included when it has children
    primary = _sort_key(cat["score"], live, None)
    primary[:, 0] = -math.inf  # the root pops first
    # The heap's tie-break: the node added earlier, i.e. the earlier parent pop, then the lower rank.
    pops = _refine(primary, lambda: (cat["parent"].clamp(min=0), cat["rank"]), k)[:, :pops_max]  # (R, P)
    popped = live.gather(1, pops)  # (R, P): a prefix of each row
    pop_index = torch.zeros(r, g, dtype=torch.long, device=device)
    pop_index.scatter_(1, pops, torch.arange(pops.shape[1], device=device).expand_as(pops))
    # Where each popped node itself sits: child `rank` of its parent's pop (the root at 0).
    parent_pop = pop_index.gather(1, cat["parent"].clamp(min=0).gather(1, pops))
    at = torch.where(pops == 0, 0, 1 + parent_pop * k + cat["rank"].gather(1, pops))  # (R, P)
    n = min(budget, 1 + pops.shape[1] * k)
    slot = torch.arange(n - 1, device=device)  # output position - 1
    pop, rank = slot // k, slot % k  # (N-1,) which pop adds it, as which child
    source = pops[:, pop]  # (R, N-1) global index of the popped parent
    valid = popped[:, pop]
    child_tok = _take(tokens, source, rank)
    score = (cat["score"].gather(1, source) + _take(logps, source, rank)) - penalty.gather(1, source)
    child_known = (
        known.lookup(cat["known"].gather(1, source), child_tok) if known is not None else torch.full_like(source, -1)
    )
    root_known = cat["known"][:, :1] if known is not None else torch.full((r, 1), -1, device=device)
    head = slice(0, 1)  # the root's column
    return TreeBatch(
        tokens=torch.cat([cat["token"][:, head], torch.where(valid, child_tok, 0)], dim=1),
        parents=torch.cat([cat["parent"][:, head], torch.where(valid, at[:, pop], -1)], dim=1),
        depths=torch.cat([depth_of[:, head], torch.where(valid, depth_of.gather(1, source) + 1, 0)], dim=1),
        scores=torch.cat([cat["score"][:, head], torch.where(valid, score, 0.0)], dim=1),
        valid=torch.cat([cat["ok"][:, head], valid], dim=1),
        known_ids=torch.cat([root_known, torch.where(valid, child_known, -1)], dim=1),
    )


def _take(table: torch.Tensor, source: torch.Tensor, rank: torch.Tensor) -> torch.Tensor:
    """``table`` (R, G, k) at [row, source[row, j], rank[j]] -> (R, J)."""
    return table.reshape(table.shape[0], -1).gather(1, source * table.shape[-1] + rank)
