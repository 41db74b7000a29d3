"""The decoding engine: one path for every arm.

The AR baseline is this engine with no drafter (every tree is just its root); a speculative arm
passes a drafter. Batches of prompts decode together with ragged acceptance; finished rows leave
the batch. Greedy by default; with `SamplingParams` (temperature > 0) every token is a sample of
the target, drawn with its request's random stream (`jetflow_bench.engine.sampling`). Every verify step
leaves raw counters and timings; all rates are derived later (`jetflow_bench.metrics`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from jetflow_bench.arms import AR_ARM
from jetflow_bench.budget_policy import BudgetPolicy, check_budget, require_logp_scores
from jetflow_bench.engine.drafter import DraftCost, Drafter, SequenceView
from jetflow_bench.engine.faithfulness import branch_gaps
from jetflow_bench.engine.sampling import GREEDY, RandomStreams, SamplingParams, draw
from jetflow_bench.engine.speculative_sampling import sample_accept
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.engine.tree import DraftTree
from jetflow_bench.errors import JfbenchError
from jetflow_bench.runtime import synchronize


@dataclass
class StepRecord:
    """Raw counters of one request in one verify step (times are the whole batched step's)."""

    request: int
    step: int  # verify-step index of this request
    batch_step: int  # index of the batched forward; rows sharing it share the times below
    active: int  # sequences in that forward
    budget: int  # nodes allowed per tree, root included
    drafted: int  # drafted nodes (root excluded)
    accepted: int  # drafted tokens accepted AND kept after stop truncation (what τ counts)
    accepted_raw: int  # drafted tokens accepted by verification, before stop truncation
    emitted: int  # tokens appended after stop truncation (kept accepted + the bonus if kept)
    depth: int  # tree depth
    draft_passes: int  # sequential drafter forwards in this step (rows of one forward share it)
    draft_entries: int  # token positions the draft head processed for this row, summed over passes
    draft_flops: float  # estimated drafting FLOPs for this row (jetflow_bench.flops)
    verify_flops: float  # estimated FLOPs of this row's tree in the target forward
    # The split below is measured when `timing` is "split"; with "step" timing it is NaN (unmeasured).
    draft_s: float  # drafter: propose + observe (head forwards, tree building inside the drafter)
    verify_s: float  # the target forward only
    other_s: float  # engine overhead: tree checks, masks, acceptance, KV commit, stop rules
    timing: str  # "split": a device sync at every phase boundary; "step": one per step; "none": not timed
    rank1_len: int = 0  # drafted tokens on the top-ranked branch (jetflow_bench.faithfulness); 0 = none
    rank1_gap: float = float("nan")  # nats that branch falls short of the target's greedy choices along it


@dataclass
class NodeBlock:
    """One request's verified tree in one step, for the acceptance calibration (references, no copies:
    expanded to one row per node off the hot loop, `jetflow_bench.sweep.tables`)."""

    request: int
    step: int
    scores: list[float]  # (N,) the drafter's node scores (cumulative draft log-prob), root first
    parents: list[int]  # (N,)
    path: list[int]  # node indices of the accepted path, root first (raw verification)


@dataclass
class MarginalBlock:
    """One request's pass-1 children in one step, for a drafter whose trees replay from them
    (`Drafter.replay_tree`): the top-K tokens and log-probs at every depth 1..D, and each depth's
    entropy (0 unless the tree is scored by it). With the emitted output they rebuild the step's
    tree at any budget (`jetflow_bench.report.headroom`)."""

    request: int
    step: int
    tokens: list[list[int]]  # (D, K) target token ids, by descending log-prob
    logps: list[list[float]]  # (D, K)
    entropy: list[float]  # (D,)


@dataclass
class RankBlock:
    """One request's step, for a drafter that ranks what was emitted (`Drafter.emitted_ranks`): the rank
    of each committed token (accepted path, then the bonus, before stop truncation) among the
    children the drafter computed at the node before it."""

    request: int
    step: int
    ranks: list[int]


@dataclass
class RequestResult:
    request: int
    prompt_tokens: list[int]
    output_tokens: list[int]  # generated ids up to and including the stop token
    finish_reason: str  # eos | stop | length
    ttft_s: float  # arrival (the batch's start) -> first token (prefill)
    decode_s: float  # first token -> finished
    steps: int  # verify steps after prefill


@dataclass
class BatchResult:
    requests: list[RequestResult]
    steps: list[StepRecord] = field(default_factory=list)
    wall_s: float = 0.0
    nodes: list[NodeBlock] = field(default_factory=list)  # drafters whose node scores are log-probs
    compile_s: float = 0.0  # compiled target and head: the untimed warm-up that compiled this batch's shapes (not in wall_s)
    marginals: list[MarginalBlock] = field(default_factory=list)  # drafters whose trees replay (`Drafter.replay_tree`)
    ranks: list[RankBlock] = field(default_factory=list)  # drafters that rank the emitted tokens (`Drafter.ranks_emitted`)


class _Clock:
    """perf_counter reads: a step's end waits for queued device work (one sync point per step on a
    GPU); a phase boundary inside a step waits too only when the split is timed (``split``).

    Without those waits a GPU clock read inside a step measures when work was queued, not done, so
    the draft / verify / other split is only recorded when timed; on a CPU a sync costs nothing
    (every op has finished when it returns) and the split is always timed.
    """

    def __init__(self, device: torch.device, split: bool) -> None:
        self.device = device
        self.split = split or device.type != "cuda"  # `runtime.synchronize` waits on CUDA only

    def __call__(self) -> float:
        synchronize(self.device)
        return time.perf_counter()

    def phase(self) -> float:
        if self.split:
            synchronize(self.device)
        return time.perf_counter()


class _Batch:
    """Book-keeping for one batch: committed tokens, stop checks, finished results."""

    def __init__(
        self, prompts: Sequence[Sequence[int]], stop: StopRule, clock: _Clock, sampling: SamplingParams,
        streams: RandomStreams,
    ) -> None:
        self.seqs = [SequenceView(i, list(p), len(p)) for i, p in enumerate(prompts)]
        self.sampling = sampling
        self.streams = streams  # row i of the batch draws with its request's stream
        self.results: list[RequestResult | None] = [None] * len(prompts)
        self.checked = [0] * len(prompts)  # generated tokens already run through the stop rule
        self.steps_done = [0] * len(prompts)  # verify steps per request
        self.batch_steps = 0  # batched forwards so far
        self.active = list(range(len(prompts)))
        self.stop = stop
        self.clock = clock
        self.start = clock()
        self.sent = [self.start] * len(prompts)  # when each request arrived (`serving` admits them over time)
        self.first_token_at = [self.start] * len(prompts)

    def views(self) -> list[SequenceView]:
        return [self.seqs[i] for i in self.active]

    def uniforms(self, depths: torch.Tensor) -> torch.Tensor:
        """(B, N) uniforms for the token after each tree node of the active rows (``depths`` (B, N)).

        The token after a node at depth d is generated token ``len(generated) + d`` of its request.
        """
        generated = [len(self.seqs[i].tokens) - self.seqs[i].prompt_len for i in self.active]
        device = self.streams.u.device
        rows, base = torch.tensor(self.active, device=device), torch.tensor(generated, device=device)
        return self.streams.at(rows, base[:, None] + depths.to(device))

    def retire_finished(self) -> list[int]:
        """Apply the stop rule to new tokens; truncate and record finished requests.

        Returns the rows (positions in ``active``) that stay.
        """
        keep, now = [], None
        for row, i in enumerate(self.active):
            seq = self.seqs[i]
            generated = seq.tokens[seq.prompt_len :]
            end = self.stop.find_end(generated, self.checked[i])
            self.checked[i] = len(generated)
            if end is None:
                keep.append(row)
                continue
            n, reason = end
            del seq.tokens[seq.prompt_len + n :]
            now = now or self.clock.phase()  # inside a step: its tokens are already on the host
            self.results[i] = RequestResult(
                request=i, prompt_tokens=seq.tokens[: seq.prompt_len], output_tokens=seq.tokens[seq.prompt_len :],
                finish_reason=reason, ttft_s=self.first_token_at[i] - self.sent[i],
                decode_s=now - self.first_token_at[i], steps=self.steps_done[i],
            )
        return keep


def cache_capacity(longest_prompt: int, max_new_tokens: int, budget: int) -> int:
    """KV slots per row that `generate` allocates: the prompt, every new token, one tree of ``budget``."""
    return longest_prompt + max_new_tokens + budget


def check_generate_args(
    prompts: Sequence[Sequence[int]], budget: int, drafter: Drafter | None, request_ids: Sequence[int] | None,
    policy: BudgetPolicy | None,
) -> tuple[int, list[int]]:
    """The budget a decode allocates for (a policy's largest) and the prompts' request ids, checked."""
    if policy is not None:
        require_logp_scores(drafter.node_scores if drafter else None, drafter.name if drafter else AR_ARM)
        budget = policy.max_budget
    check_budget(budget)
    if drafter is None and budget != 1:
        raise JfbenchError(f"budget {budget} needs a drafter: plain decoding verifies the root only (budget 1)")
    ids = list(range(len(prompts))) if request_ids is None else list(request_ids)
    if len(ids) != len(prompts):
        raise ValueError(f"{len(ids)} request ids for {len(prompts)} prompts")
    return budget, ids


def generate(
    target: TargetRunner,
    prompts: Sequence[Sequence[int]],
    stop: StopRule,
    budget: int = 1,
    drafter: Drafter | None = None,
    sampling: SamplingParams = GREEDY,
    request_ids: Sequence[int] | None = None,
    policy: BudgetPolicy | None = None,
    profile: bool = False,
) -> BatchResult:
    """Decode a batch of tokenised prompts (greedy, or sampled per ``sampling``); speculative when a
    drafter is given. ``request_ids`` name the prompts' random streams (default 0..B-1): give each
    prompt the same id in every arm and batch so that reruns and arms draw the same numbers.

    With a ``policy`` the budget is chosen per step among its candidates (``budget`` is ignored):
    the drafter builds at ``policy.draft_budget()`` and the trees are cut to the chosen prefix.
    ``profile`` times the draft / verify / other split of every step on a GPU (a device sync at each
    phase boundary, `_Clock`); a policy needs the drafting seconds, so it times the split too.
    """
    budget, ids = check_generate_args(prompts, budget, drafter, request_ids, policy)
    clock = _Clock(target.device, split=profile or policy is not None)
    capacity = cache_capacity(max(len(p) for p in prompts), stop.max_new_tokens, target.tree_width(budget))
    taps = drafter.taps if drafter else ()
    compile_s = target.warm_up(len(prompts), budget, capacity, taps)  # compiled target: before the clock starts
    if drafter is not None:  # and its compiled head
        compile_s += drafter.warm_up(len(prompts), budget, capacity)
    streams = RandomStreams(sampling.seed, ids, stop.max_new_tokens + budget, device=target.device)
    batch = _Batch(prompts, stop, clock, sampling, streams)
    try:
        out = target.prefill(prompts, capacity, taps=taps)
        first_logits = out.logits[:, 0]  # (B, V): prefill scores each prompt's last token only
        first_u = batch.uniforms(torch.zeros(len(prompts), 1, dtype=torch.long))[:, 0]  # (B,) generated token 0
        first = draw(first_logits, first_u, sampling).tolist()
        batch.first_token_at = [clock()] * len(prompts)
        for seq, token in zip(batch.seqs, first, strict=True):
            seq.tokens.append(token)
        keep = batch.retire_finished()
        _shrink(target, batch, keep)
        if drafter is not None:
            drafter.reset(batch.seqs)
            if batch.active:
                features = None if out.hidden is None else [out.hidden[i, : len(prompts[i])] for i in batch.active]
                drafter.observe(batch.views(), features)
            drafter.take_cost(len(batch.active))  # the prompt's context features belong to prefill
        steps: list[StepRecord] = []
        nodes: list[NodeBlock] | None = [] if drafter is not None and drafter.node_scores == "logp" else None
        marginals: list[MarginalBlock] | None = [] if drafter is not None and drafter.replay_tree() is not None else None
        ranks: list[RankBlock] | None = [] if drafter is not None and drafter.ranks_emitted else None
        while batch.active:
            steps.extend(_speculative_step(target, batch, budget, drafter, policy, nodes, marginals, ranks))
    finally:
        target.release()
    return BatchResult([r for r in batch.results if r is not None], steps, wall_s=clock() - batch.start, nodes=nodes or [],
                       compile_s=compile_s, marginals=marginals or [], ranks=ranks or [])


def _speculative_step(
    target: TargetRunner, batch: _Batch, budget: int, drafter: Drafter | None, policy: BudgetPolicy | None,
    nodes: list[NodeBlock] | None, marginals: list[MarginalBlock] | None, ranks: list[RankBlock] | None,
) -> list[StepRecord]:
    """Draft -> (choose the budget) -> verify -> accept -> commit for every active row.

    Acceptance: the target's token after every node is drawn (its argmax when greedy); keep the
    deepest node whose whole root path matches the target's token at each parent, then append the
    target's token at that node (the bonus). At temperature > 0 this is rejection sampling with
    point-mass drafts, which keeps the target's distribution (`jetflow_bench.engine.speculative_sampling`).
    Counting: a row's `accepted` is what survives the stop rule — when EOS, a stop string or
    max_new_tokens cuts the final step, the accepted tokens past the cut were never emitted.
    """
    views, clock = batch.views(), batch.clock
    if policy is not None:
        budget = policy.draft_budget()
    t0 = clock.phase()  # the previous step (or the prefill) ended with a sync
    drafting = drafter is not None and budget > 1  # budget 1 verifies the root alone: nothing to ask a drafter
    trees = drafter.propose(views, budget) if drafting else [DraftTree.root_only(v.tokens[-1]) for v in views]
    t1 = clock.phase()
    _check_trees(trees, views, budget, drafter)
    drafted = trees
    if policy is not None:  # the trees are ordered: a prefix is the tree a smaller budget builds
        budget = policy.choose([t.scores for t in trees])
        trees = [t.prefix(budget) for t in trees]
    prepared = target.prepare(trees)
    t2 = clock.phase()
    ver = target.forward(prepared, drafter.taps if drafter else ())
    t3 = clock.phase()
    acc = sample_accept(
        prepared.tokens, prepared.parents, prepared.depths, prepared.valid, prepared.ancestors, ver.logits,
        batch.uniforms(prepared.depths), batch.sampling,
    )
    target.commit(acc.paths)
    rows = list(batch.active)
    before = [len(v.tokens) for v in views]  # committed length + 1: the root is not cached yet
    for i in rows:
        batch.steps_done[i] += 1
    for row, seq in enumerate(views):
        seq.tokens.extend(trees[row].tokens[node] for node in acc.paths[row][1:])
        seq.tokens.append(acc.bonus[row])
    keep = batch.retire_finished()
    emitted = [len(v.tokens) - n for v, n in zip(views, before, strict=True)]
    _shrink(target, batch, keep)
    t4 = clock.phase()
    if drafter is not None and keep:
        features = None if ver.hidden is None else [ver.hidden[r, acc.paths[r]] for r in keep]
        drafter.observe(batch.views(), features)
    t5 = clock.phase()
    if nodes is not None:
        nodes.extend(NodeBlock(i, batch.steps_done[i] - 1, trees[row].scores, trees[row].parents, acc.paths[row])
                     for row, i in enumerate(rows))
    if policy is not None:
        policy.observe(drafted, _committed(trees, acc), (t1 - t0) + (t5 - t4))
    t6 = clock()  # the step's one sync
    split = (t1 - t0) + (t5 - t4), t3 - t2, (t2 - t1) + (t4 - t3) + (t6 - t5)  # draft, verify, other
    if not clock.split:
        split = (math.nan,) * 3
    # A measurement, not part of decoding: outside every timed span (its host transfer syncs).
    rank1_len, rank1_gap = branch_gaps(trees, ver.logits) if drafting else ([0] * len(rows), [0.0] * len(rows))
    if marginals is not None and drafting:
        marginals.extend(_marginal_blocks(drafter, rows, batch))
    if ranks is not None and drafting:
        ranked = drafter.emitted_ranks(_committed(trees, acc))
        ranks.extend(RankBlock(i, batch.steps_done[i] - 1, r) for i, r in zip(rows, ranked, strict=True))
    cost = drafter.take_cost(len(rows)) if drafter else DraftCost.free(len(rows))
    batch.batch_steps += 1
    return [
        StepRecord(
            request=i, step=batch.steps_done[i] - 1, batch_step=batch.batch_steps - 1, active=len(rows),
            budget=budget, drafted=len(trees[row]) - 1, accepted=min(acc.accepted[row], emitted[row]),
            accepted_raw=acc.accepted[row], emitted=emitted[row], depth=trees[row].depth,
            draft_passes=cost.passes, draft_entries=cost.entries[row], draft_flops=cost.flops[row],
            verify_flops=target.shape.forward_flops(len(trees[row]), before[row] - 1 + len(trees[row])),
            draft_s=split[0], verify_s=split[1], other_s=split[2], timing="split" if clock.split else "step",
            rank1_len=rank1_len[row], rank1_gap=rank1_gap[row],
        )
        for row, i in enumerate(rows)
    ]


def _committed(trees: list[DraftTree], acc) -> list[list[int]]:
    """Each row's accepted path tokens, then its bonus token (before the stop rule cuts them)."""
    return [[tree.tokens[u] for u in path[1:]] + [bonus] for tree, path, bonus in zip(trees, acc.paths, acc.bonus, strict=True)]


def _marginal_blocks(drafter: Drafter, rows: list[int], batch: _Batch) -> list[MarginalBlock]:
    """The step's pass-1 children of every row, on the host (one transfer per tensor)."""
    dists = drafter.last_marginals()
    tokens, logps, entropy = dists.tokens.tolist(), dists.logps.tolist(), dists.entropy.tolist()
    return [MarginalBlock(i, batch.steps_done[i] - 1, tokens[row], logps[row], entropy[row]) for row, i in enumerate(rows)]


def _shrink(target: TargetRunner, batch: _Batch, keep: list[int]) -> None:
    """Drop finished rows from the target cache and the active list."""
    if len(keep) < len(batch.active):
        if keep:
            target.keep_rows(keep)
        batch.active = [batch.active[r] for r in keep]


def _check_trees(trees: list[DraftTree], views: list[SequenceView], budget: int, drafter: Drafter | None) -> None:
    """A plug-in's tree must fit the budget and grow from the committed last token."""
    name = drafter.name if drafter else AR_ARM
    if len(trees) != len(views):
        raise RuntimeError(f"drafter {name!r} returned {len(trees)} trees for {len(views)} sequences")
    for tree, view in zip(trees, views, strict=True):
        if len(tree) > budget:
            raise RuntimeError(f"drafter {name!r} proposed {len(tree)} nodes, over the budget of {budget}")
        if tree.tokens[0] != view.tokens[-1]:
            raise RuntimeError(f"drafter {name!r} proposed a tree whose root is not the last committed token")
