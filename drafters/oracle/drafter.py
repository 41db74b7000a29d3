"""A test double that is a real plug-in: it proposes the target's own greedy continuation.

Given the AR baseline's outputs, every proposed token is right, so τ reaches the budget-limited
maximum (min(budget, remaining tokens)) — a check that the engine loses nothing it should keep.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from jetflow_bench.engine.drafter import Drafter, SequenceView
from jetflow_bench.engine.tree import DraftTree


class OracleDrafter(Drafter):
    name = "oracle"
    cli_refusal = (
        "it is a test double that proposes the target's own greedy output, which it must be given "
        "in Python (drafters.oracle.drafter.OracleDrafter(references)); use ngram or a trained head instead"
    )

    def __init__(self, references: Mapping[tuple[int, ...], Sequence[int]]) -> None:
        self.references = references  # prompt tokens -> the target's greedy output for it

    def propose(self, seqs: Sequence[SequenceView], budget: int) -> list[DraftTree]:
        trees = []
        for seq in seqs:
            reference = self.references[tuple(seq.tokens[: seq.prompt_len])]
            done = len(seq.tokens) - seq.prompt_len
            trees.append(DraftTree.chain([seq.tokens[-1], *reference[done : done + budget - 1]]))
        return trees
