"""The decoding engine: one path for every arm.

The AR baseline is this engine with no drafter (every tree is just its root); a speculative arm
passes a drafter. Batches of prompts decode together with ragged acceptance; finished rows leave
the batch. Greedy by default; with `SamplingParams` (temperature > 0) every token is a sample of
the target, drawn with its request's random stream (`jetflow_bench.engine.sampling`). Every verify step
leaves raw counters and timings; all rates are derived later (`jetflow_bench.measure.metrics`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from jetflow_bench.core.arms import AR_ARM
from jetflow_bench.core.budget_policy import BudgetPolicy, check_budget, require_logp_scores
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.drafter import Drafter, SequenceView
from jetflow_bench.engine.meter import (
    Clock,
    MarginalBlock,
    NodeBlock,
    RankBlock,
    StepMeter,
    StepRecord,
)
from jetflow_bench.engine.sampling import GREEDY, RandomStreams, SamplingParams, draw
from jetflow_bench.engine.speculative_sampling import sample_accept
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.engine.tree import DraftTree


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


class _Batch:
    """Book-keeping for one batch: committed tokens, stop checks, finished results."""

    def __init__(
        self, prompts: Sequence[Sequence[int]], stop: StopRule, clock: Clock, sampling: SamplingParams,
        streams: RandomStreams,
    ) -> None:
        self.seqs = [SequenceView(i, list(p), len(p)) for i, p in enumerate(prompts)]
        self.sampling = sampling
        self.streams = streams  # row i of the batch draws with its request's stream
        self.results: list[RequestResult | None] = [None] * len(prompts)
        self.checked = [0] * len(prompts)  # generated tokens already run through the stop rule
        self.steps_done = [0] * len(prompts)  # verify steps per request
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
    phase boundary, `Clock`); a policy needs the drafting seconds, so it times the split too.
    """
    budget, ids = check_generate_args(prompts, budget, drafter, request_ids, policy)
    clock = Clock(target.device, split=profile or policy is not None)
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
        meter = StepMeter(clock, drafter, policy, target.shape)
        while batch.active:
            _speculative_step(target, batch, budget, drafter, meter)
    finally:
        target.release()
    return batch_result(batch, meter, clock() - batch.start, compile_s)


def batch_result(batch: _Batch, meter: StepMeter, wall_s: float, compile_s: float = 0.0) -> BatchResult:
    """The finished requests of ``batch`` with every record ``meter`` kept."""
    return batch_result_of([r for r in batch.results if r is not None], meter, wall_s, compile_s)


def batch_result_of(requests: list[RequestResult], meter: StepMeter, wall_s: float, compile_s: float = 0.0) -> BatchResult:
    """``requests`` with every record ``meter`` kept (`engine.simulate` has no `_Batch`)."""
    return BatchResult(requests, meter.steps, wall_s=wall_s, nodes=meter.nodes or [], compile_s=compile_s,
                       marginals=meter.marginals or [], ranks=meter.ranks or [])


def _speculative_step(
    target: TargetRunner, batch: _Batch, budget: int, drafter: Drafter | None, meter: StepMeter,
) -> list[StepRecord]:
    """Draft -> verify -> accept -> commit for every active row; ``meter`` stamps and counts each stage.

    Acceptance: the target's token after every node is drawn (its argmax when greedy); keep the
    deepest node whose whole root path matches the target's token at each parent, then append the
    target's token at that node (the bonus). At temperature > 0 this is rejection sampling with
    point-mass drafts, which keeps the target's distribution (`jetflow_bench.engine.speculative_sampling`).
    """
    views = batch.views()
    budget = meter.begin(budget)  # a budget policy drafts at its largest candidate
    trees, drafting = draft_trees(drafter, views, budget)
    meter.drafted(trees, drafting)
    check_trees(trees, views, budget, drafter)
    trees = meter.choose(trees)  # a budget policy verifies a prefix of each tree
    prepared = target.prepare(trees)
    meter.prepared()
    ver = target.forward(prepared, drafter.taps if drafter else ())
    meter.verified()
    acc = sample_accept(
        prepared.tokens, prepared.parents, prepared.depths, prepared.valid, prepared.ancestors, ver.logits,
        batch.uniforms(prepared.depths), batch.sampling,
    )
    target.commit(acc.paths)
    rows, before = list(batch.active), [len(v.tokens) for v in views]
    for i, seq, tree, path, bonus in zip(rows, views, trees, acc.paths, acc.bonus, strict=True):
        batch.steps_done[i] += 1
        seq.tokens.extend(tree.tokens[node] for node in path[1:])
        seq.tokens.append(bonus)
    keep = batch.retire_finished()
    _shrink(target, batch, keep)
    meter.committed(views, before)
    if drafter is not None and keep:
        features = None if ver.hidden is None else [ver.hidden[r, acc.paths[r]] for r in keep]
        drafter.observe(batch.views(), features)
    return meter.finish(rows, batch.steps_done, before, trees, acc, ver.logits)


def _shrink(target: TargetRunner, batch: _Batch, keep: list[int]) -> None:
    """Drop finished rows from the target cache and the active list."""
    if len(keep) < len(batch.active):
        if keep:
            target.keep_rows(keep)
        batch.active = [batch.active[r] for r in keep]


def draft_trees(drafter: Drafter | None, views: list[SequenceView], budget: int) -> tuple[list[DraftTree], bool]:
    """A step's trees, and whether the drafter made them: budget 1 (or no drafter) verifies the root
    alone, with nothing to ask a drafter."""
    drafting = drafter is not None and budget > 1
    return (drafter.propose(views, budget) if drafting else [DraftTree.root_only(v.tokens[-1]) for v in views]), drafting


def check_trees(trees: list[DraftTree], views: list[SequenceView], budget: int, drafter: Drafter | None) -> None:
    """A plug-in's tree must fit the budget and grow from the committed last token."""
    name = drafter.name if drafter else AR_ARM
    if len(trees) != len(views):
        raise RuntimeError(f"drafter {name!r} returned {len(trees)} trees for {len(views)} sequences")
    for tree, view in zip(trees, views, strict=True):
        if len(tree) > budget:
            raise RuntimeError(f"drafter {name!r} proposed {len(tree)} nodes, over the budget of {budget}")
        if tree.tokens[0] != view.tokens[-1]:
            raise RuntimeError(f"drafter {name!r} proposed a tree whose root is not the last committed token")
