"""Prompt lookup on literal token lists: which match, which occurrence, chain vs trie."""

from __future__ import annotations

import random

import pytest

from drafters.ngram.drafter import NgramDrafter, find_continuations, trie_tree
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.drafter import SequenceView

TOKENS = [5, 6, 7, 9, 5, 6, 8, 5, 6]


def vllm_rule(tokens: list[int], min_n: int, max_n: int, k: int) -> list[int]:
    """vLLM's prompt lookup by brute force: the longest suffix n-gram seen before, its EARLIEST occurrence."""
    for n in range(min(max_n, len(tokens) - 1), min_n - 1, -1):
        starts = [p for p in range(len(tokens) - n) if tokens[p : p + n] == tokens[-n:]]
        if starts:
            return tokens[starts[0] + n : starts[0] + n + k]
    return []


def test_docstring_example_orders():
    assert find_continuations(TOKENS, 2, 1, 3, 8, "latest") == [[8, 5, 6], [7, 9, 5]]
    assert find_continuations(TOKENS, 2, 1, 3, 8, "earliest") == [[7, 9, 5], [8, 5, 6]]
    assert find_continuations(TOKENS, 2, 1, 3, 1, "latest") == [[8, 5, 6]]  # max_matches


def test_vllm_docstring_example():
    # [4, 2, 3] has no earlier match; [2, 3] does, followed by only three tokens
    assert find_continuations([1, 2, 3, 4, 2, 3], 3, 2, 4, 8, "earliest")[0] == [4, 2, 3]
    assert find_continuations([1, 2, 3, 4, 2, 3], 3, 3, 4, 8, "earliest") == []  # min_ngram 3: no match


@pytest.mark.parametrize("seed", range(20))
def test_earliest_matches_vllm_by_brute_force(seed):
    rng = random.Random(seed)
    tokens = [rng.randrange(4) for _ in range(rng.randrange(2, 60))]  # 4 symbols: many repeats
    for min_n, max_n in ((1, 4), (2, 3), (4, 4)):
        found = find_continuations(tokens, max_n, min_n, 4, 8, "earliest")
        assert (found[0] if found else []) == vllm_rule(tokens, min_n, max_n, 4)


def test_a_chain_budget_drafts_the_first_continuation_and_a_larger_one_adds_a_trie():
    drafter = NgramDrafter(max_ngram=2)
    seq = SequenceView(0, [5, 6, 7, 9, 1, 5, 6, 8, 3, 2, 5, 6], 3)
    chain = drafter.propose([seq], 5)[0]  # 4 drafted tokens, like vLLM's 4 speculative tokens
    assert chain.tokens == [6, 8, 3, 2, 5] and chain.parents == [-1, 0, 1, 2, 3]
    tree = drafter.propose([seq], 16)[0]
    assert {tree.tokens[i] for i in range(1, len(tree)) if tree.parents[i] == 0} == {8, 7}  # two branches


def test_trie_merges_shared_prefixes():
    tree = trie_tree(0, [[1, 2], [1, 3], [4]], 16)
    assert tree.tokens == [0, 1, 2, 3, 4] and tree.parents == [-1, 0, 1, 1, 0]
    assert tree.scores[1] == 2.0  # two continuations pass through token 1
    assert len(trie_tree(0, [[1, 2], [1, 3], [4]], 3)) == 3


def test_bad_options_are_user_errors():
    with pytest.raises(JfbenchError, match="prefer"):
        NgramDrafter(prefer="middle")
    with pytest.raises(JfbenchError, match="min_ngram"):
        NgramDrafter(min_ngram=5, max_ngram=4)
