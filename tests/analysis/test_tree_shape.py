"""`jfbench show --table tree`: drafted and accepted nodes per tree depth, from nodes.parquet.

Bugs caught: depths off by one or taken from build order instead of parent links, counts divided
by the wrong number of steps, repeats not pooled, and a damaged node table read as a shallow tree.
The end-to-end test checks the shape against the step rows' own counters, which the engine records
separately from the node rows.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import pandas as pd
import pytest

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.report.tree_shape import by_depth, node_depths, tree_shape
from tests.helpers.data_dirs import benchmark_data_dir
from tests.helpers.random_models import save_random_model

CELL = {"suite": "gsm8k", "drafter": "jetflow", "variant": "default", "budget": 8, "batch_size": 1, "repeat": 0,
        "temperature": 0.0}


def nodes(rows: list[tuple[int, int, int, bool]], **cell) -> pd.DataFrame:
    """(step, node, parent, accepted) rows of one request in one cell."""
    frame = pd.DataFrame(rows, columns=["step", "node", "parent", "accepted"])
    return frame.assign(**{**CELL, **cell}, request=0, score=-1.0)


def test_depths_follow_parent_links_in_any_row_order():
    # step 0: the chain 1 -> 3 -> 2 (a parent may come after its child in the rows) and a sibling 4
    frame = nodes([(0, 2, 3, True), (0, 3, 1, True), (0, 1, 0, True), (0, 4, 0, False), (1, 1, 0, False)])
    assert node_depths(frame).tolist() == [3, 2, 1, 1, 1]
    chain = nodes([(0, n, n - 1, False) for n in range(1, 256)])  # prompt lookup's 255-token chain at B = 256
    assert node_depths(chain).tolist() == list(range(1, 256))


def test_shape_is_per_drafting_step_and_pools_nothing_across_cells():
    frame = pd.concat([
        nodes([(0, 1, 0, True), (0, 2, 1, True), (0, 3, 0, False), (1, 1, 0, False), (1, 2, 0, True)]),
        nodes([(0, 1, 0, True)], drafter="eagle"),
    ])
    shape = tree_shape(frame).set_index(["drafter", "depth"])
    assert shape.loc[("jetflow", 1), ["drafted", "accepted", "steps"]].tolist() == [2.0, 1.0, 2]  # 4 first tokens, 2 steps
    assert shape.loc[("jetflow", 2), ["drafted", "accepted"]].tolist() == [0.5, 0.5]
    assert shape.loc[("eagle", 1), ["drafted", "accepted", "steps"]].tolist() == [1.0, 1.0, 1]
    assert len(shape) == 3


def test_by_depth_pools_repeats_and_folds_deep_nodes_into_one_column():
    frame = pd.concat([
        nodes([(0, 1, 0, True), (0, 2, 1, True), (1, 1, 0, False)], repeat=0),  # 2 steps: d1 1.0, d2 0.5
        nodes([(0, 1, 0, True), (0, 2, 0, True), (0, 3, 0, False), (0, 4, 0, False)], repeat=1),  # 1 step: d1 4.0
        nodes([(0, n, n - 1, False) for n in range(1, 16)], drafter="ngram"),  # a 15-token chain
    ])
    wide = by_depth(tree_shape(frame), "drafted").set_index("drafter")
    assert wide.loc["jetflow", ["steps", "d1", "d2"]].tolist() == [3, 2.5, 0.25]  # the repeats' mean
    assert wide.loc["ngram", "d12"] == 1 and wide.loc["ngram", "d>12"] == 3 and wide.loc["jetflow", "d>12"] == 0
    assert [c for c in wide.columns if c.startswith("d")][-2:] == ["d12", "d>12"]


@pytest.mark.parametrize(
    ("rows", "problem"),
    [
        ([(0, 1, 0, True), (0, 5, 9, False)], "1 node row(s) name a parent that is not in their step"),
        ([(0, 1, 0, True), (0, 2, 3, False), (0, 3, 2, False)], "parent links form a cycle"),
        ([(0, 1, 0, True), (0, 1, 0, False)], "1 node row(s) repeat a node of their step"),
    ],
)
def test_a_damaged_node_table_is_named_not_read_as_a_tree(rows, problem):
    with pytest.raises(JfbenchError, match=re.escape(f"nodes.parquet is damaged ({problem})")):
        node_depths(nodes(rows))


def test_show_tree_agrees_with_the_step_counters(learned_heads, micro_target, tmp_path, cli):  # noqa: F811
    out = tmp_path / "run"
    drafters = f"eagle={learned_heads['eagle']},jetflow={learned_heads['jetflow']},ngram"
    code, _, err = cli("sweep", "--target", str(micro_target), "--out", str(out), "--drafters", drafters, "--suites", "gsm8k",
                           "--budgets", "8", "--limit", "2", "--max-new-tokens", "12", "--repeats", "2",
                           "--data-dir", str(benchmark_data_dir()), "--threads", "1", "--no-progress")
    assert code == 0, err
    code, text, err = cli("show", str(out), "--table", "tree", "--format", "csv")
    assert code == 0, err
    shape = pd.read_csv(io.StringIO(text))
    assert set(shape["drafter"]) == {"eagle", "jetflow"}  # prompt lookup's nodes carry no log-prob: not recorded
    steps = pd.read_parquet(out / "steps.parquet").query("drafted > 0 and drafter != 'ngram'")
    keys = ["drafter", "repeat"]
    counters = steps.groupby(keys).agg(steps=("step", "size"), drafted=("drafted", "sum"),
                                       accepted=("accepted_raw", "sum"), depth=("depth", "max"))
    totals = shape.assign(drafted=shape["drafted"] * shape["steps"], accepted=shape["accepted"] * shape["steps"])
    totals = totals.groupby(keys).agg(steps=("steps", "first"), drafted=("drafted", "sum"),
                                      accepted=("accepted", "sum"), depth=("depth", "max"))
    pd.testing.assert_frame_equal(totals.round(6), counters.astype(float).round(6), check_dtype=False)
    assert counters["accepted"].gt(0).all()  # drafts were accepted, so the accepted columns are tested

    code, text, _ = cli("show", str(out), "--table", "tree", "--format", "markdown")
    assert code == 0 and text.count("| gsm8k | jetflow | 8 | 1 |") == 2  # drafted and accepted, repeats pooled
    assert "**run: accepted nodes per step, by tree depth**" in text and "repeats pooled" in text

    html = tmp_path / "report.html"
    code, _, err = cli("report", str(out), "--out", str(html))
    assert code == 0 and "How the trees were shaped" in html.read_text(), err
    nodes_file = out / "nodes.parquet"
    nodes_file.write_bytes(nodes_file.read_bytes()[:200])  # a half-copied file: readers warn and go on
    code, _, err = cli("report", str(out), "--out", str(html))
    assert code == 0 and "nodes.parquet is unreadable" in err and "How the trees were shaped" not in html.read_text()
    code, text, err = cli("show", str(out), "--table", "tree")
    assert code == 2 and text == "" and err.count("\n") == 1 and "re-run the sweep (the same command)" in err


def test_show_tree_without_drafted_nodes_is_one_line(tmp_path: Path, cli):
    target, out = save_random_model(tmp_path / "rand"), tmp_path / "run"
    code, _, err = cli("sweep", "--target", str(target), "--out", str(out), "--drafters", "ngram", "--suites", "gsm8k",
                       "--budgets", "4", "--limit", "2", "--max-new-tokens", "8", "--repeats", "1",
                       "--data-dir", str(benchmark_data_dir()), "--threads", "1", "--no-progress")
    assert code == 0, err
    code, text, err = cli("show", str(out), "--table", "tree")
    assert code == 2 and text == "" and err.count("\n") == 1 and "holds no drafted nodes" in err
