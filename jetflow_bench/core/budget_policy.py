"""Choosing the draft budget per step (`--budgets auto`): the candidate with the most expected tokens per second.

For one batched step with trees T_1..T_b (nodes in build order) and each candidate budget B up to
the budget they were drafted at:

    E[tokens | B] = Σ_rows ( 1 + Σ_{u in T_r[:B], u ≠ root} P(u's whole root path is accepted) )
    step_s(B)     = verify_s(N_B, b) + bookkeeping_s(N_B, b) + draft_s(B),   N_B = min(B, max_r |T_r|)
    chosen B      = argmax_B E[tokens | B] / step_s(B)          (ties: the smaller budget)

The trees are drafted at `draft_budget`: the largest candidate at the first step, then the previous
choice, except every EXPLORE_EVERY-th step, which drafts at the largest candidate again so that the
choice can grow to any budget. (Exploring only one candidate above gets stuck where the speed-up
curve dips before it rises: on a CPU, B = 4 can lose to B = 1 while B = 16 beats both.) Drafting
at the previous choice (not always at the largest candidate) keeps a drafter whose cost grows
with the budget from paying for trees it does not verify. The "+ 1" is the bonus token; a node
counts once, whatever its depth, because the accepted length is the number of accepted nodes on
the accepted path (greedy acceptance keeps one root path). The
prefix T_r[:B] is what the drafter would build at B: accum, best-first and spine-first add nodes
in an order that does not depend on the budget (tested), so truncation equals a fresh build.
draft_s(D) is the running mean of measured drafting seconds when drafting at budget D, so step_s(B)
is what a step costs while the policy keeps choosing B (EAGLE's drafting grows with the depth the
budget allows; a block head's barely moves). A draft budget not yet tried is assumed free (0 s):
optimism that makes the policy try it once, after which its measured cost counts.

P(path accepted) comes from `OnlineCalibration`: per score bin (`jetflow_bench.core.calibration`),

    P(u) = (accepted_b + m · exp(score_u)) / (nodes_b + m)

i.e. a prior that trusts the drafter's own cumulative draft probability, worth m pseudo-nodes per
bin, updated after every step with every drafted node whose fate the committed tokens decide
(`label_nodes`: also nodes past the chosen prefix, so a step at B = 1 still teaches depth 1). Why a prior plus online
updates rather than the drafter's training data: a released head ships no acceptance statistics,
the prior is right for a calibrated drafter from step one, and a miscalibrated one (an
over-confident head on out-of-domain text) is corrected within a few steps of the request at hand.
Pure numpy: no torch, no drafter names.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from jetflow_bench.core.calibration import SCORE_EDGES, score_bin
from jetflow_bench.core.errors import JfbenchError

DEFAULT_CANDIDATES: tuple[int, ...] = (1, 4, 16, 64, 256)
MAX_BUDGET = 1024  # most nodes per tree, root included
# Tables store a cell's budget as an int column (the committed runs' schema): a fixed budget is its
# size, a cell whose budget the policy chooses is this. Only table readers meet it; code passes `Budget`.
AUTO_COLUMN = 0
PRIOR_NODES = 8.0  # m: pseudo-nodes per bin that the drafter's own probability is worth
DRAFT_EMA = 0.2  # weight of the newest step in the running draft-seconds estimate
EXPLORE_EVERY = 8  # every 8th step drafts at the largest candidate


def check_budget(nodes: int) -> None:
    """The one range rule for a tree size B (nodes, root included)."""
    if not 1 <= nodes <= MAX_BUDGET:
        raise JfbenchError(f"budget {nodes} is out of range: use 1 <= budget <= {MAX_BUDGET} (nodes incl. root)")


@functools.total_ordering
@dataclass(frozen=True)
class Budget:
    """A cell's draft budget: one fixed tree size, or the per-step policy over candidate sizes.

    Build it with `Budget.fixed` / `Budget.auto` (the CLI: `sweep.grid.parse_budgets`); every size is
    range-checked here.
    """

    policy: bool  # True: the policy chooses among ``sizes`` every step (`--budgets auto`)
    sizes: tuple[int, ...]  # fixed: (B,); policy: the candidates, ascending

    def __post_init__(self) -> None:
        if not self.sizes or (not self.policy and len(self.sizes) != 1):
            raise ValueError(f"a budget has one size, or candidates for the policy: {self.sizes}")
        for size in self.sizes:
            check_budget(size)
        object.__setattr__(self, "sizes", tuple(sorted(set(self.sizes))))

    @classmethod
    def fixed(cls, nodes: int) -> Budget:
        return cls(False, (nodes,))

    @classmethod
    def auto(cls, candidates: Sequence[int] = DEFAULT_CANDIDATES) -> Budget:
        return cls(True, tuple(candidates))

    @property
    def nodes(self) -> int:
        """The most nodes a tree is drafted with (the fixed size, or the largest candidate)."""
        return self.sizes[-1]

    @property
    def column(self) -> int:
        """The value of the tables' ``budget`` column (`AUTO_COLUMN` for the policy)."""
        return AUTO_COLUMN if self.policy else self.sizes[0]

    @property
    def label(self) -> str:
        return budget_label(self.column)

    def __lt__(self, other: Budget) -> bool:
        return (self.column, self.sizes) < (other.column, other.sizes)


def require_logp_scores(node_scores: str | None, arm: str) -> None:
    """The per-step policy ranks nodes by their cumulative draft log-prob: refuse drafters without one."""
    if node_scores != "logp":
        raise JfbenchError(
            f"--budgets auto: drafter {arm!r} does not score nodes by cumulative draft log-probs, which the "
            "per-step policy needs; run it with static budgets only (a separate sweep)"
        )


def budget_label(column: int) -> str:
    """'auto' for the policy's cells, else the size (of a tables' ``budget`` value)."""
    return "auto" if column == AUTO_COLUMN else str(column)


StepCost = Callable[[int, int], float]  # (nodes per tree N, batch b) -> verify + bookkeeping seconds


@dataclass
class OnlineCalibration:
    """P(node on the accepted path | its score bin), a prior updated online (module docstring)."""

    prior_nodes: float = PRIOR_NODES  # inf: never update (trust the scores)
    nodes: np.ndarray = field(default_factory=lambda: np.zeros(len(SCORE_EDGES) - 1))  # (bins,)
    accepted: np.ndarray = field(default_factory=lambda: np.zeros(len(SCORE_EDGES) - 1))  # (bins,)

    def probability(self, scores: Sequence[float] | np.ndarray) -> np.ndarray:
        scores = np.asarray(scores, dtype=float)
        bins = score_bin(scores)
        claimed = np.exp(np.minimum(scores, 0.0))
        if np.isinf(self.prior_nodes):  # an infinitely strong prior: the drafter's claim as is
            return claimed
        return (self.accepted[bins] + self.prior_nodes * claimed) / (self.nodes[bins] + self.prior_nodes)

    def update(self, scores: Sequence[float] | np.ndarray, accepted: Sequence[bool] | np.ndarray) -> None:
        bins = score_bin(scores)
        np.add.at(self.nodes, bins, 1.0)
        np.add.at(self.accepted, bins, np.asarray(accepted, dtype=float))


def expected_tokens(path_probs: Sequence[np.ndarray], budgets: Sequence[int]) -> np.ndarray:
    """(K,) E[tokens | B] summed over rows; ``path_probs[r]`` = P(accepted) of row r's drafted
    nodes in build order (root excluded), so budget B keeps the first B − 1 of them.

    Example: one row with probs [.9, .5, .1], budgets (1, 2, 4) -> [1, 1.9, 2.5].
    """
    budgets = np.asarray(budgets, dtype=int)
    total = np.zeros(len(budgets))
    for probs in path_probs:
        cumulative = np.concatenate([[0.0], np.cumsum(probs)])  # (n + 1,)
        total += 1.0 + cumulative[np.minimum(budgets - 1, len(probs))]
    return total


def best_budget(budgets: Sequence[int], expected: np.ndarray, step_s: np.ndarray) -> int:
    """The budget with the most expected tokens per second; ties go to the smaller budget."""
    order = np.argsort(budgets, kind="stable")
    rate = (np.asarray(expected, dtype=float) / np.asarray(step_s, dtype=float))[order]
    return int(np.asarray(budgets)[order][int(np.argmax(rate))])


@dataclass
class BudgetPolicy:
    """Per-step budget choice for one cell (module docstring); `observe` after every step."""

    candidates: tuple[int, ...]  # ascending budgets B (nodes incl. the root)
    step_cost: StepCost  # verify + bookkeeping seconds of trees of N nodes at batch b
    calibration: OnlineCalibration = field(default_factory=OnlineCalibration)
    draft_s: dict[int, float] = field(default_factory=dict)  # draft budget D -> running mean drafting seconds
    seen_steps: int = 0
    last: int | None = None  # the budget chosen at the previous step
    drafted_at: int = 0  # the draft budget of the current step (set by `draft_budget`)

    def __post_init__(self) -> None:
        self.candidates = tuple(sorted(set(self.candidates)))

    @property
    def max_budget(self) -> int:
        return self.candidates[-1]

    def draft_budget(self) -> int:
        """The budget to draft at this step (module docstring): the largest candidate at the first
        step and every EXPLORE_EVERY-th step, else the previous choice."""
        if self.last is None or self.seen_steps % EXPLORE_EVERY == EXPLORE_EVERY - 1:
            self.drafted_at = self.max_budget
        else:
            self.drafted_at = self.last
        return self.drafted_at

    def predict(self, scores: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
        """(E[tokens | B], step_s(B)) per candidate for trees whose node scores are ``scores``
        (one list per row, root first, build order)."""
        probs = [self.calibration.probability(row[1:]) for row in scores]
        longest = max(len(row) for row in scores)
        step_s = np.array([self.step_cost(min(b, longest), len(scores)) + self.draft_s.get(b, 0.0)
                           for b in self.candidates])
        return expected_tokens(probs, self.candidates), step_s

    def choose(self, scores: Sequence[Sequence[float]]) -> int:
        """The best candidate for trees drafted at `draft_budget` (larger candidates cannot be cut
        from them, so they are not considered)."""
        expected, step_s = self.predict(scores)
        ceiling = self.drafted_at or self.max_budget
        allowed = [k for k, b in enumerate(self.candidates) if b <= ceiling]
        self.last = best_budget([self.candidates[k] for k in allowed], expected[allowed], step_s[allowed])
        return self.last

    def observe(self, trees: Sequence[ScoredTree], committed: Sequence[Sequence[int]], draft_s: float) -> None:
        """Learn from one step: each row's drafted tree (the full one, at the draft budget), the
        tokens the step committed for it (accepted path + bonus, before stop truncation), and the
        step's drafting seconds. Nodes are labelled by `label_nodes`, so even a step verified at
        B = 1 teaches the calibration about every depth-1 node (the bonus token decides them); without
        that, a policy that once chose B = 1 would never see evidence to leave it."""
        for tree, tokens in zip(trees, committed, strict=True):
            labels = label_nodes(tree.tokens, tree.parents, tokens)[1:]
            known = labels >= 0
            self.calibration.update(np.asarray(tree.scores[1:], dtype=float)[known], labels[known] == 1)
        drafted_at = self.drafted_at or self.max_budget
        before = self.draft_s.get(drafted_at)
        self.draft_s[drafted_at] = draft_s if before is None else (1 - DRAFT_EMA) * before + DRAFT_EMA * draft_s
        self.seen_steps += 1


class ScoredTree(Protocol):
    tokens: list[int]  # (N,) root first
    parents: list[int]  # (N,) parents precede children
    scores: list[float]  # (N,) cumulative draft log-prob


def label_nodes(tokens: Sequence[int], parents: Sequence[int], committed: Sequence[int]) -> np.ndarray:
    """(N,) per node: 1 = its root path is a prefix of ``committed`` (the target's greedy
    continuation), 0 = it is not (a token on its path differs), -1 = unknown (deeper than
    ``committed`` below a matching path). The root is 1.

    Example: root r with children a, b, a with child c; committed = [a] -> r: 1, a: 1, b: 0, c: -1.
    """
    labels = np.empty(len(tokens), dtype=np.int8)
    depth = np.zeros(len(tokens), dtype=int)
    labels[0] = 1
    for node in range(1, len(tokens)):
        parent = parents[node]
        depth[node] = depth[parent] + 1
        if labels[parent] != 1:
            labels[node] = labels[parent]  # below a rejected node: rejected; below an unknown: unknown
        elif depth[node] > len(committed):
            labels[node] = -1
        else:
            labels[node] = int(tokens[node] == committed[depth[node] - 1])
    return labels
