"""Headroom: block drafters' trees replayed offline at any budget (`jetflow_bench.report.headroom`)."""

from __future__ import annotations

import io
import json
import random

import pandas as pd
import pytest

from drafters.axes import CONSTRUCTIONS
from drafters.tree_builder import ChildDist, TreeOptions, build_tree, marginal_lookup
from jetflow_bench.engine.drafter import NOT_EXPLORED
from jetflow_bench.engine.tree import emitted, matched_nodes
from jetflow_bench.report.claims import tau_inf
from jetflow_bench.report.headroom import (
    headroom_table,
    nearest,
    replay_cell,
    replay_check,
    top_k_depth,
)
from tests.helpers.data_dirs import benchmark_data_dir
from tests.helpers.random_models import save_random_model


def _marginals(seed: int, depth: int = 6, k: int = 3, vocab: int = 5) -> list[ChildDist]:
    rng = random.Random(seed)
    dists = []
    for _ in range(depth):
        tokens = rng.sample(range(vocab), k)
        logps = sorted((-rng.expovariate(1.0) for _ in range(k)), reverse=True)
        dists.append(ChildDist(tuple(tokens), tuple(logps), rng.random()))
    return dists


@pytest.mark.parametrize("construction", CONSTRUCTIONS)
@pytest.mark.parametrize("scoring", ["logp", "entropy"])
def test_a_smaller_budget_builds_a_prefix_of_the_larger_tree(construction, scoring):
    """The replay builds each step once at the largest budget and reads smaller ones as prefixes."""
    options = TreeOptions(construction=construction, scoring=scoring, fanout=3, max_depth=6, top_k=2)
    for seed in range(20):
        children = marginal_lookup(_marginals(seed))
        large = build_tree(0, children, 200, options)
        for budget in (7, 8, 16, 40, 100):
            small = build_tree(0, children, budget, options)
            assert (small.tokens, small.parents) == (large.tokens[:budget], large.parents[:budget]), (seed, budget)


def test_a_step_accepts_the_path_that_spells_the_output_and_stops_at_its_end():
    dists = [ChildDist((5, 6), (-0.1, -2.0)), ChildDist((7, 8), (-0.2, -1.0)), ChildDist((9, 1), (-0.1, -3.0))]
    tree = build_tree(0, marginal_lookup(dists), 64, TreeOptions(fanout=2, max_depth=3))
    path = matched_nodes(tree, [6, 8, 1, 4])
    assert [tree.tokens[n] for n in path] == [6, 8, 1]
    assert matched_nodes(tree, [6, 3, 1]) == path[:1]  # a miss at depth 2 ends the path
    assert emitted(len(path), left=10) == 4 and emitted(len(path), left=2) == 2  # the stop rule cuts the last step
    assert top_k_depth(dists, [6, 8, 1, 4], max_depth=3) == 3 and top_k_depth(dists, [6, 8, 1], max_depth=2) == 2
    assert nearest(16, [8, 64]) == 8 and nearest(32, [8, 64]) == 64 and nearest(32, [16, 64]) == 64  # a tie: the larger


def test_replay_counts_each_step_from_where_the_output_stood():
    dists = [ChildDist((5, 6), (-0.1, -2.0)), ChildDist((7, 8), (-0.2, -1.0))]
    flat = {"k": 2, "tokens": [t for d in dists for t in d.tokens], "logps": [lp for d in dists for lp in d.logps],
            "entropy": [0.0, 0.0], "tree": json.dumps({"fanout": 2, "max_depth": 2})}
    marginals = pd.DataFrame([{"request": 0, "step": s, **flat} for s in range(3)])
    # output: token 0 from prefill; step 0 emits 5,7 (+bonus 1); step 1 emits 2; step 2 emits 5 then stops
    output = [9, 5, 7, 1, 2, 5]
    steps = pd.DataFrame({"request": [0, 0, 0], "step": [0, 1, 2], "emitted": [3, 1, 1]})
    total, bound, n = replay_cell(marginals, steps, {0: output}, [2, 3, 8])
    assert n == 3 and total[8] == 3 + 1 + 1  # the measured cell, at B >= 7 the full 2 x 2 tree
    assert total[2] == 2 + 1 + 1  # at B = 2 the tree is the root and token 5: step 0 accepts one
    assert bound == 5


def test_headroom_replays_the_measured_tau_of_block_drafters(learned_heads, micro_target, tmp_path, cli):  # noqa: F811
    out = tmp_path / "run"
    names = ("dflash", "jetflow", "jetflow-refine", "eagle")
    drafters = ",".join(f"{name}={learned_heads[name.removesuffix('-refine')]}" for name in names)
    code, _, err = cli("sweep", "--target", str(micro_target), "--out", str(out), "--drafters", drafters, "--suites", "gsm8k",
                       "--budgets", "16,48", "--limit", "3", "--max-new-tokens", "20", "--repeats", "1",
                       "--threads", "1", "--no-progress", "--data-dir", str(benchmark_data_dir()))
    assert code == 0, err
    steps = pd.read_parquet(out / "steps.parquet")
    deep = steps[steps["drafter"].isin(["dflash", "jetflow"])].groupby("drafter")["accepted"].max()
    assert deep.ge(2).all(), deep  # each arm's replay is tested past depth 1 (at one budget at least: quick heads)
    code, text, err = cli("show", str(out), "--table", "headroom", "--format", "csv")
    assert code == 0, err
    table = pd.read_csv(io.StringIO(text), dtype={"budget": str})
    assert set(table["arm"]) == {"dflash", "jetflow"}  # a refinement pass's children depend on the branch: not recorded
    measured = table[table["tau"].notna()]
    assert sorted(measured["budget"].astype(int).unique()) == [16, 48] and len(measured) == 4
    assert (measured["budget"].astype(int) == measured["source"]).all()
    ratio = measured["tau_replayed"] / measured["tau"]
    assert ratio.between(0.99, 1.01).all(), measured
    summary = pd.read_parquet(out / "summary.parquet").set_index(["drafter", "budget"])["tau"]
    for row in measured.itertuples():
        assert row.tau == pytest.approx(summary[row.arm, int(row.budget)])
    for arm, rows in table.groupby("arm"):
        replayed = rows[rows["budget"] != "inf"].assign(budget=lambda f: f["budget"].astype(int)).sort_values("budget")
        bound = rows.loc[rows["budget"] == "inf", "tau_replayed"].item()
        assert replayed["budget"].tolist() == [16, 32, 48, 64, 128, 256, 512, 1024], arm
        assert bound >= replayed["tau_replayed"].max() - 1e-9
        assert set(replayed.loc[replayed["budget"] >= 32, "source"]) == {48}
    bounds = table[table["budget"] == "inf"].set_index("arm")["tau_replayed"]
    assert tau_inf([out]) == pytest.approx({("gsm8k", arm): bound for arm, bound in bounds.items()})  # claim 1's reachable
    code, text, err = cli("show", str(out), "--table", "headroom")
    assert code == 0 and "tau_inf" in text and "the estimate checked" in text, err

    tables = [pd.read_parquet(out / f"{name}.parquet") for name in ("marginals", "steps", "requests")]
    check = replay_check(*tables).set_index(["arm", "budget"])
    assert sorted(check.index) == [(arm, b) for arm in ("dflash", "jetflow") for b in (16, 48)]
    assert check["source"].to_dict() == {(arm, b): 64 - b for arm in ("dflash", "jetflow") for b in (16, 48)}  # the other one
    for (arm, budget), row in check.iterrows():
        assert row["tau"] == pytest.approx(summary[arm, budget])
        only_other = [t[t["budget"] != budget] for t in tables]  # the other cell alone: the table's estimate at this budget
        estimate = headroom_table(*only_other, budgets=(budget,)).set_index(["arm", "budget"])
        assert row["tau_replayed"] == pytest.approx(estimate.loc[(arm, budget), "tau_replayed"])
        assert row["error"] == pytest.approx(row["tau_replayed"] / row["tau"] - 1)

    ranks = pd.read_parquet(out / "ranks.parquet")  # EAGLE cannot be replayed: it ranks what it emitted
    assert set(ranks["drafter"]) == {"eagle"}
    eagle = steps[steps["drafter"] == "eagle"].merge(ranks, on=["budget", "request", "step"])
    assert len(eagle) == len(steps[steps["drafter"] == "eagle"]) and eagle["accepted_raw"].max() >= 2
    for row in eagle.itertuples():
        assert len(row.ranks) == row.accepted_raw + 1  # every accepted token, then the bonus
        assert all(0 <= r < 7 for r in row.ranks[:-1])  # an accepted token was one of its parent's top-K children
        assert row.ranks[-1] >= NOT_EXPLORED
    assert any(row.ranks[-1] >= 0 for row in eagle.itertuples())  # a guess the tree left out: a wider fan-out catches it


def test_headroom_of_a_run_without_block_drafters_is_one_line(tmp_path, cli):
    target, out = save_random_model(tmp_path / "rand"), tmp_path / "run"
    code, _, err = cli("sweep", "--target", str(target), "--out", str(out), "--drafters", "ngram", "--suites", "gsm8k",
                       "--budgets", "4", "--limit", "2", "--max-new-tokens", "8", "--repeats", "1",
                       "--data-dir", str(benchmark_data_dir()), "--threads", "1", "--no-progress")
    assert code == 0, err
    assert not list((out / "cells").glob("*.marginals.parquet"))  # prompt lookup records none
    code, text, err = cli("show", str(out), "--table", "headroom")
    assert code == 2 and text == "" and err.count("\n") == 1 and "holds no replayable steps" in err
    (out / "marginals.parquet").unlink()  # a run from before the table existed
    code, text, err = cli("show", str(out), "--table", "headroom", "--format", "csv")
    assert code == 2 and text == "" and err.count("\n") == 1 and "re-run it with --force" in err
