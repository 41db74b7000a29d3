"""Pure tree arithmetic and greedy acceptance on hand-written trees."""

import pytest
import torch

from jetflow_bench.engine.acceptance import accept_tree
from jetflow_bench.engine.tree import DraftTree, ancestor_mask, pad_trees

# root "The"=10, children cat=11 / dog=12, cat -> sat=13   (the module docstring's example)
EXAMPLE = DraftTree([10, 11, 12, 13], [-1, 0, 0, 1])


def test_depths_and_paths():
    assert EXAMPLE.depths == [0, 1, 1, 2]
    assert EXAMPLE.depth == 2
    assert EXAMPLE.path_to(3) == [0, 1, 3]


def test_ancestor_mask_matches_worked_example():
    tokens, parents, depths, valid = pad_trees([EXAMPLE])
    anc = ancestor_mask(parents, depths)[0].int().tolist()
    assert anc == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]


def test_ancestor_mask_never_sees_siblings_or_descendants():
    tree = DraftTree([0, 1, 2, 3, 4, 5, 6], [-1, 0, 0, 1, 1, 2, 5])
    _, parents, depths, _ = pad_trees([tree])
    anc = ancestor_mask(parents, depths)[0]
    for i in range(len(tree)):
        expected = set(tree.path_to(i))
        assert {j for j in range(len(tree)) if anc[i, j]} == expected


def test_padding_rows_only_see_themselves():
    _, parents, depths, valid = pad_trees([EXAMPLE, DraftTree.root_only(7)])
    anc = ancestor_mask(parents, depths)
    assert valid[1].tolist() == [True, False, False, False]
    assert anc[1].int().tolist() == torch.eye(4, dtype=torch.int).tolist()


def test_invalid_trees_are_rejected():
    with pytest.raises(ValueError):
        DraftTree([1, 2], [-1, 1])  # parent after child
    with pytest.raises(ValueError):
        DraftTree([1, 2], [0, 0])  # no root


def _accept(trees, argmax_rows):
    tokens, parents, depths, valid = pad_trees(trees)
    anc = ancestor_mask(parents, depths)
    n = tokens.shape[1]
    argmax = torch.tensor([row + [0] * (n - len(row)) for row in argmax_rows])
    return accept_tree(tokens, parents, depths, valid, anc, argmax)


def test_accepts_deepest_matching_path_and_bonus():
    # target: after "The" -> cat, after cat -> sat, after sat -> 99
    acc = _accept([EXAMPLE], [[11, 13, 0, 99]])
    assert acc.paths == [[0, 1, 3]] and acc.accepted == [2] and acc.bonus == [99]


def test_rejects_branch_when_parent_wrong():
    # target wants "dog" after "The", then 42 after dog; "sat" must not count (its parent "cat" is wrong)
    acc = _accept([EXAMPLE], [[12, 13, 42, 0]])
    assert acc.paths == [[0, 2]] and acc.accepted == [1] and acc.bonus == [42]


def test_nothing_accepted_gives_root_and_target_token():
    acc = _accept([EXAMPLE, DraftTree.root_only(5)], [[50, 0, 0, 0], [8]])
    assert acc.paths == [[0], [0]] and acc.accepted == [0, 0] and acc.bonus == [50, 8]


def test_chain_prefix_acceptance():
    chain = DraftTree.chain([1, 2, 3, 4, 5])
    acc = _accept([chain], [[2, 3, 9, 5, 6]])  # 4 is wrong (target wanted 9 after 3)
    assert acc.accepted == [2] and acc.bonus == [9] and acc.paths == [[0, 1, 2]]
