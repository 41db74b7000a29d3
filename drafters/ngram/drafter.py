"""Prompt-lookup (n-gram) drafting: no model, no training.

The last n committed tokens are searched for earlier in the sequence (prompt and output alike);
what followed each earlier occurrence is proposed. Invariant: every proposed path is a verbatim
continuation of some earlier occurrence of the current suffix, so on repetitive text the drafts
are free and often right.

Which match: the longest suffix n-gram, n from ``max_ngram`` (default 4, vLLM's setting in the
comparison of docs/drafters.md) down to ``min_ngram``, that occurs earlier. Its occurrences are
ordered by ``prefer``:
- ``"latest"`` (default): most recent first. Recent text is the better predictor here: on GSM8K
  prompts of the micro target it accepts more per drafting step than the earliest occurrence.
- ``"earliest"``: vLLM's rule (`vllm/v1/spec_decode/ngram_proposer.py` proposes the continuation
  of the earliest occurrence of the longest match), then the others most recent first.
The first occurrence's continuation is the chain a chain-sized budget (budget - 1 <= ``max_depth``)
gets in full; larger budgets add the other occurrences' continuations, merged into a trie (a
short first continuation, e.g. one overlapping the suffix, is extended by the next one sharing
its prefix).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.drafter import Drafter, SequenceView
from jetflow_bench.engine.tree import DraftTree

PREFER = ("latest", "earliest")


def find_continuations(
    tokens: Sequence[int], max_ngram: int, min_ngram: int, depth: int, max_matches: int, prefer: str = "latest"
) -> list[list[int]]:
    """Continuations (each at most ``depth`` long) of up to ``max_matches`` earlier occurrences of
    the longest suffix n-gram, in ``prefer`` order (module docstring).

    Example: tokens = [5, 6, 7, 9, 5, 6, 8, 5, 6], max_ngram=2, depth 3 -> suffix [5, 6] occurs at
    0 and 4: prefer="latest" -> [[8, 5, 6], [7, 9, 5]]; prefer="earliest" -> [[7, 9, 5], [8, 5, 6]].
    """
    arr = np.asarray(tokens, dtype=np.int64)
    for n in range(min(max_ngram, len(arr) - 1), min_ngram - 1, -1):
        windows = sliding_window_view(arr[:-1], n)  # (L-n, n): window p = arr[p : p+n], continuation exists
        hits = np.flatnonzero((windows == arr[-n:]).all(axis=1))
        if hits.size:
            latest_first = hits[::-1]
            order = [hits[0], *latest_first[:-1]] if prefer == "earliest" else latest_first
            return [arr[p + n : p + n + depth].tolist() for p in order[:max_matches]]
    return []


def trie_tree(root: int, continuations: Sequence[Sequence[int]], budget: int) -> DraftTree:
    """Merge continuations into one tree of at most ``budget`` nodes (root included).

    Earlier continuations have priority; a node's score is how many continuations pass through it.
    """
    tokens, parents, scores = [root], [-1], [0.0]
    child: dict[tuple[int, int], int] = {}
    for cont in continuations:
        node = 0
        for token in cont:
            key = (node, token)
            if key not in child:
                if len(tokens) >= budget:
                    break
                child[key] = len(tokens)
                tokens.append(token)
                parents.append(node)
                scores.append(0.0)
            node = child[key]
            scores[node] += 1.0
    return DraftTree(tokens, parents, scores)


class NgramDrafter(Drafter):
    """Prompt lookup; proposes a chain, or a tree when earlier matches continue differently."""

    name = "ngram"

    @classmethod
    def nominal_counters(cls, budget: int, block_size: int | None, options: Mapping[str, Any]) -> tuple[float, float]:
        return 0.0, 0.0  # a host-side suffix lookup: no model forward

    def __init__(
        self, max_ngram: int = 4, min_ngram: int = 1, max_depth: int = 16, max_matches: int = 8, prefer: str = "latest"
    ) -> None:
        if prefer not in PREFER or not 1 <= min_ngram <= max_ngram:
            raise JfbenchError(
                f"ngram: prefer={prefer!r}, min_ngram={min_ngram}, max_ngram={max_ngram}: prefer is one of "
                f"{', '.join(PREFER)} and 1 <= min_ngram <= max_ngram"
            )
        self.prefer = prefer  # which occurrence of the match comes first (module docstring)
        self.max_ngram = max_ngram  # longest suffix searched for
        self.min_ngram = min_ngram  # shortest suffix accepted as a match
        self.max_depth = max_depth  # longest continuation proposed
        self.max_matches = max_matches  # most recent occurrences merged into the tree

    def propose(self, seqs: Sequence[SequenceView], budget: int) -> list[DraftTree]:
        trees = []
        for seq in seqs:
            depth = min(self.max_depth, budget - 1)
            conts = find_continuations(seq.tokens, self.max_ngram, self.min_ngram, depth, self.max_matches, self.prefer)
            trees.append(trie_tree(seq.tokens[-1], conts, budget))
        return trees
