from jetflow_bench.core.arms import AR_ARM, DEFAULT_VARIANT
from jetflow_bench.core.budget_policy import Budget
from jetflow_bench.sweep.grid import Cell
from jetflow_bench.sweep.groups import pairing_groups


def _cell(suite: str, drafter: str, batch: int, repeat: int, temperature: float = 0.0) -> Cell:
    budget = Budget.fixed(1 if drafter == AR_ARM else 16)
    return Cell(suite, drafter, DEFAULT_VARIANT, budget, batch, repeat, temperature)


def test_groups_hold_every_repeat_of_a_suite_and_batch_size_with_its_baselines():
    grid = [_cell(s, d, b, r, t) for r in (0, 1) for s in ("gsm8k", "mbpp") for t in (0.0, 1.0)
            for b in (1, 4) for d in (AR_ARM, "ngram")]
    groups = pairing_groups(grid)
    assert len(groups) == 8
    assert sum(len(g.cells) for g in groups) == len(grid)
    first = groups[0]
    assert (first.suite, first.batch_size, first.temperature) == ("gsm8k", 1, 0.0)
    assert [(c.drafter, c.repeat) for c in first.cells] == [(AR_ARM, 0), ("ngram", 0), (AR_ARM, 1), ("ngram", 1)]
    assert {g.group_id for g in groups} >= {"gsm8k__bs1", "mbpp__bs4__T1"}
    assert len({g.group_id for g in groups}) == len(groups)
