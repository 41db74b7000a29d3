"""The step's instruments: clock stamps, raw counters and calibration records of every verify step.

`loop._speculative_step` is the algorithm (draft -> verify -> accept -> commit); it calls a
`StepMeter` at the boundary after each stage (`begin`, `drafted`, `prepared`, `verified`,
`committed`, `finish`) and the meter turns what it saw into the step's records: one `StepRecord`
per request (timings, FLOPs, drafting cost, the faithfulness counters) and the blocks some
drafters' calibrations read (`NodeBlock`, `MarginalBlock`, `RankBlock`). A budget policy lives
here too: it chooses each step's budget from what the meter measured (the drafting seconds), so
`begin` and `choose` are the one place the meter steers the step.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from jetflow_bench.core.budget_policy import BudgetPolicy
from jetflow_bench.core.flops import TransformerShape
from jetflow_bench.core.runtime import synchronize
from jetflow_bench.engine.acceptance import Acceptance
from jetflow_bench.engine.drafter import DraftCost, Drafter, SequenceView
from jetflow_bench.engine.faithfulness import branch_gaps
from jetflow_bench.engine.tree import DraftTree


class Clock:
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
    draft_flops: float  # estimated drafting FLOPs for this row (jetflow_bench.core.flops)
    verify_flops: float  # estimated FLOPs of this row's tree in the target forward
    # The split below is measured when `timing` is "split"; with "step" timing it is NaN (unmeasured).
    draft_s: float  # drafter: propose + observe (head forwards, tree building inside the drafter)
    verify_s: float  # the target forward only
    other_s: float  # engine overhead: tree checks, masks, acceptance, KV commit, stop rules
    timing: str  # "split": a device sync at every phase boundary; "step": one per step; "none": not timed
    rank1_len: int = 0  # drafted tokens on the top-ranked branch (jetflow_bench.engine.faithfulness); 0 = none
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


class StepMeter:
    """Everything a decode's steps record, stamped and counted at the step's named points.

    Built once per batch (`generate`, `serve`); keeps the batch's records. The split of each step
    (draft, verify, other) is read from six phase stamps and the step's closing sync::

        t0 begin | draft t1 drafted | other t2 prepared | verify t3 verified | other t4 committed
        | draft (the drafter observes) t5 finish | other (calibration, policy) t6

    and is NaN unless the clock times the split (`Clock`). An untimed meter (``timed=False``:
    `engine.simulate`, which runs no verify) records NaN times with timing "none".
    """

    def __init__(self, clock: Clock, drafter: Drafter | None, policy: BudgetPolicy | None, shape: TransformerShape,
                 timed: bool = True) -> None:
        self.clock, self.drafter, self.policy, self.shape, self.timed = clock, drafter, policy, shape, timed
        self.steps: list[StepRecord] = []
        self.nodes: list[NodeBlock] | None = [] if drafter is not None and drafter.node_scores == "logp" else None
        self.marginals: list[MarginalBlock] | None = [] if drafter is not None and drafter.replay_tree() is not None else None
        self.ranks: list[RankBlock] | None = [] if drafter is not None and drafter.ranks_emitted else None
        self.batch_steps = 0  # batched forwards so far
        self.stamps: list[float] = []  # this step's phase stamps t0..t4
        self.budget = 0  # this step's verified budget
        self.drafting = False  # this step asked the drafter for trees
        self.proposed: list[DraftTree] = []  # this step's trees as drafted (before a policy's cut)
        self.emitted: list[int] = []

    def begin(self, budget: int) -> int:
        """A step starts (the previous one, or the prefill, ended with a sync): the budget to draft at,
        a policy's largest candidate when it chooses per step."""
        self.budget = budget if self.policy is None else self.policy.draft_budget()
        self.stamps = [self.clock.phase()]
        return self.budget

    def drafted(self, trees: list[DraftTree], drafting: bool) -> None:
        """The trees are proposed (``drafting``: by the drafter; else they are roots alone)."""
        self.stamps.append(self.clock.phase())
        self.proposed, self.drafting = trees, drafting

    def choose(self, trees: list[DraftTree]) -> list[DraftTree]:
        """The trees to verify: a policy's chosen prefix of each (the trees are ordered: a prefix is the
        tree a smaller budget builds); without a policy, the trees as drafted."""
        if self.policy is None:
            return trees
        self.budget = self.policy.choose([t.scores for t in trees])
        return [t.prefix(self.budget) for t in trees]

    def prepared(self) -> None:
        self.stamps.append(self.clock.phase())

    def verified(self) -> None:
        self.stamps.append(self.clock.phase())

    def committed(self, views: Sequence[SequenceView], before: Sequence[int]) -> None:
        """The step's tokens are committed and stop-checked: ``before`` is each row's length before."""
        self.emitted = [len(v.tokens) - n for v, n in zip(views, before, strict=True)]
        self.stamps.append(self.clock.phase())

    def finish(
        self, rows: list[int], steps_done: Sequence[int], before: Sequence[int], trees: list[DraftTree], acc: Acceptance,
        logits: torch.Tensor | None,
    ) -> list[StepRecord]:
        """The step ends (the drafter has observed it): the records of its ``rows`` (request ids), whose
        lengths were ``before`` (committed length + 1: the root is not cached yet) and which verified
        ``trees`` with ``logits`` and accepted ``acc``. A row's ``accepted`` is what survives the stop
        rule: when EOS, a stop string or max_new_tokens cuts the final step, the accepted tokens past
        the cut were never emitted. Without ``logits`` (no verify forward ran) the top branch's gap is NaN."""
        t0, t1, t2, t3, t4 = self.stamps
        t5 = self.clock.phase()
        step = [steps_done[i] - 1 for i in rows]
        if self.nodes is not None:
            self.nodes.extend(NodeBlock(i, s, tree.scores, tree.parents, path)
                              for i, s, tree, path in zip(rows, step, trees, acc.paths, strict=True))
        if self.policy is not None:
            self.policy.observe(self.proposed, _committed(trees, acc), (t1 - t0) + (t5 - t4))
        t6 = self.clock()  # the step's one sync
        split = (t1 - t0) + (t5 - t4), t3 - t2, (t2 - t1) + (t4 - t3) + (t6 - t5)  # draft, verify, other
        timing = "none" if not self.timed else "split" if self.clock.split else "step"
        if timing != "split":
            split = (math.nan,) * 3
        # A measurement, not part of decoding: outside every timed span (its host transfer syncs).
        drafter, drafting = self.drafter, self.drafting
        if logits is None:  # unmeasured
            rank1_len, rank1_gap = [0] * len(rows), [math.nan] * len(rows)
        else:
            rank1_len, rank1_gap = branch_gaps(trees, logits) if drafting else ([0] * len(rows), [0.0] * len(rows))
        if self.marginals is not None and drafting:
            dists = drafter.last_marginals()  # one host transfer per tensor
            tokens, logps, entropy = dists.tokens.tolist(), dists.logps.tolist(), dists.entropy.tolist()
            self.marginals.extend(MarginalBlock(i, s, tokens[row], logps[row], entropy[row])
                                  for row, (i, s) in enumerate(zip(rows, step, strict=True)))
        if self.ranks is not None and drafting:
            ranked = drafter.emitted_ranks(_committed(trees, acc))
            self.ranks.extend(RankBlock(i, s, r) for i, s, r in zip(rows, step, ranked, strict=True))
        cost = drafter.take_cost(len(rows)) if drafter else DraftCost.free(len(rows))
        self.batch_steps += 1
        records = [
            StepRecord(
                request=i, step=step[row], batch_step=self.batch_steps - 1, active=len(rows),
                budget=self.budget, drafted=len(trees[row]) - 1, accepted=min(acc.accepted[row], self.emitted[row]),
                accepted_raw=acc.accepted[row], emitted=self.emitted[row], depth=trees[row].depth,
                draft_passes=cost.passes, draft_entries=cost.entries[row], draft_flops=cost.flops[row],
                verify_flops=self.shape.forward_flops(len(trees[row]), before[row] - 1 + len(trees[row])),
                draft_s=split[0], verify_s=split[1], other_s=split[2], timing=timing,
                rank1_len=rank1_len[row], rank1_gap=rank1_gap[row],
            )
            for row, i in enumerate(rows)
        ]
        self.steps.extend(records)
        return records


def _committed(trees: list[DraftTree], acc: Acceptance) -> list[list[int]]:
    """Each row's accepted path tokens, then its bonus token when known (before the stop rule cuts them)."""
    return [[tree.tokens[u] for u in path[1:]] + ([] if bonus is None else [bonus])
            for tree, path, bonus in zip(trees, acc.paths, acc.bonus, strict=True)]
