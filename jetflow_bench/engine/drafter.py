"""The drafter port: the only thing the engine knows about a drafter.

It lives in the engine (which imports no drafter, no training and no harness) so that drafter
families plug into it from above; `drafters.base` re-exports it for plug-ins written against that
spelling. How a family's heads train is no part of it: the family's record says that
(`jetflow_bench.plugins.Family`).

The engine never branches on a drafter's name. Per batch of prompts it calls ``reset`` once, then
alternates ``propose`` (one tree per active sequence) and ``observe`` (what became committed).
Under continuous batching (`jetflow_bench.engine.serving`) requests also join a running batch at
step boundaries: ``admit`` reports their prompts, apart from the rows already running.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from jetflow_bench.engine.tree import DraftTree

if TYPE_CHECKING:
    from jetflow_bench.engine.target import TargetRunner


OUTSIDE_TOP_K = -1  # `Drafter.emitted_ranks`: the token was not among the node's top-K children
NOT_EXPLORED = -2  # `Drafter.emitted_ranks`: the drafter computed no children for the node


@dataclass(frozen=True)
class Dists:
    """Top-K children distributions in slots: one per depth (marginals) or per known node. The engine
    records a replayable drafter's per-depth ones (`Drafter.last_marginals`); the tree builders
    (`drafters.tree_tensors`) produce and consume them."""

    tokens: torch.Tensor  # (R, S, K) long, distinct tokens by descending log-prob
    logps: torch.Tensor  # (R, S, K) float32 log q(token)
    entropy: torch.Tensor  # (R, S) float32, nats, of the full distribution

    @property
    def k(self) -> int:
        return self.tokens.shape[-1]


@dataclass
class DraftCost:
    """What drafting cost during one engine step, for each row of the batch (raw counters).

    Covers ``propose`` and the ``observe`` that follows it. A batched head forward counts once in
    ``passes`` (rows run it together) and in full in every row's ``entries``; FLOPs of batched work
    are shared equally among the step's rows.
    """

    passes: int  # sequential drafter forwards this step (EAGLE: one per depth; JetFlow: 1 + r; ngram: 0)
    entries: list[int]  # (B,) token positions the head processed for each row, summed over passes
    flops: list[float]  # (B,) estimated FLOPs spent on each row (jetflow_bench.core.flops)

    @classmethod
    def free(cls, rows: int) -> DraftCost:
        """Drafting without a model (prompt lookup, test doubles): nothing the counters measure."""
        return cls(0, [0] * rows, [0.0] * rows)


@dataclass
class SequenceView:
    """What a drafter may read about one sequence. Owned by the engine; do not mutate."""

    request: int  # stable index of the request within the current batch
    tokens: list[int]  # committed token ids, prompt included; tokens[-1] is the next tree's root
    prompt_len: int  # tokens[:prompt_len] is the prompt


class Drafter(ABC):
    """Proposes a draft tree per sequence under a node budget (root included)."""

    name: ClassVar[str] = "drafter"
    taps: tuple[int, ...] = ()  # target layer indices whose hidden states `observe` receives
    cli_refusal: ClassVar[str | None] = None  # why a sweep cannot build it from the CLI (test doubles)
    # What DraftTree.scores hold: "logp" = cumulative draft log-prob (recorded per node for the
    # acceptance calibration, and what `--budgets auto` needs); None = no probability meaning.
    node_scores: str | None = None
    ranks_emitted: ClassVar[bool] = False  # whether `emitted_ranks` answers (then the engine records it)

    @classmethod
    def scores_with(cls, options: Mapping[str, Any]) -> str | None:
        """`node_scores` of an instance built with ``options``: read before any model loads
        (`--budgets auto` refuses an arm whose scores are not log-probs)."""
        return cls.node_scores

    @classmethod
    def max_compiled_budget(cls, options: Mapping[str, Any]) -> int | None:
        """``--compile``: the largest budget an instance built with ``options`` drafts at bucketed
        shapes, read before any model loads (None: no limit below the target's)."""
        return None

    @classmethod
    def build(cls, target: TargetRunner, checkpoint: Path | None = None, **options: Any) -> Drafter:
        """Construct for ``target``; learned drafters load ``checkpoint`` here."""
        return cls(**options)

    def warm_up(self, batch: int, budget: int, capacity: int) -> float:
        """``--compile``: compile every shape drafting ``batch`` rows at ``budget`` can meet, before the
        clock starts (``capacity``: the target's KV slots per row); the seconds spent (0.0: nothing compiled)."""
        return 0.0

    def reset(self, seqs: Sequence[SequenceView]) -> None:  # noqa: B027 - optional hook
        """A new batch of prompts starts: drop all per-request state."""

    def admit(self, seqs: Sequence[SequenceView], features: Sequence[torch.Tensor] | None) -> None:  # noqa: B027
        """Requests ``seqs`` (prompt + first token each) join the running batch after its rows; ``features``
        as in ``observe``, for their prompts. The next ``propose`` lists the running rows, then these.

        Nothing to do for a drafter that keeps no per-request state (ngram); one that does (whatever
        ``reset`` drops) must add the newcomers' rows here without touching the running ones'.
        """

    def observe(self, seqs: Sequence[SequenceView], features: Sequence[torch.Tensor] | None) -> None:  # noqa: B027
        """Tokens were committed (after prefill and after every verify step).

        ``features[i]`` holds, for ``seqs[i]``, the tapped target hidden states of the tokens newly
        written to the target's KV cache, shape (n_new, len(taps), hidden); it is None when the
        drafter has no taps. Those tokens are ``seqs[i].tokens[-1 - n_new : -1]`` (the last token is
        the next root, not yet in the cache).
        """

    @abstractmethod
    def propose(self, seqs: Sequence[SequenceView], budget: int) -> list[DraftTree]:
        """One tree per sequence, root = ``seq.tokens[-1]``, at most ``budget`` nodes; ``budget`` >= 2
        (at budget 1 the engine verifies the root alone without asking)."""

    @classmethod
    def nominal_counters(cls, budget: int, block_size: int | None, options: Mapping[str, Any]) -> tuple[float, float] | None:
        """(head forwards, entries per sequence) of one step at ``budget`` >= 2 implied by the algorithm
        with ``options`` over this class's defaults, for runs recorded before the engine counted them
        (`jetflow_bench.projection.nominal`); None: not derivable (the projection then refuses)."""
        return None

    def replay_tree(self) -> object | None:
        """How this drafter's trees grow (a learned drafter's `drafters.tree_builder.TreeOptions`) from the per-depth children `last_marginals` returns, when its
        trees are a function of those alone (a block head's pass 1: every node at depth d gets the
        same top-K). The engine then records them every step, and the suite rebuilds the tree at any
        budget offline (`jetflow_bench.report.headroom`). None (the default): not replayable, nothing
        recorded."""
        return None

    def last_marginals(self) -> Dists | None:
        """The last proposal's per-depth top-K children (rows, D, K), for a drafter with a `replay_tree`
        (a reference to what `propose` computed: the engine copies it to the host outside the clock)."""
        return None

    def emitted_ranks(self, committed: Sequence[Sequence[int]]) -> list[list[int]] | None:
        """For each row of the last proposal, given the step's committed tokens (accepted path, then
        the bonus): the rank of token d among the children distribution the drafter computed at the
        node spelled by the tokens before it (0 = its best guess), ``OUTSIDE_TOP_K`` when the token was
        not among its top K, ``NOT_EXPLORED`` when that node had no distribution. For a drafter whose
        children depend on their branch (EAGLE), so that its trees cannot be replayed (`replay_tree`):
        the ranks say whether a wider fan-out along the accepted path would have caught the bonus.
        None (the default): nothing recorded."""
        return None

    def take_cost(self, rows: int) -> DraftCost:
        """The drafting cost since the last call, for the ``rows`` sequences of the step just drafted.

        The engine calls it once per step after ``observe`` (and once after the prompt's
        ``observe``, whose cost belongs to prefill). Drafters that run a model override this.
        """
        return DraftCost.free(rows)
