"""The run-folder side of calibrated acceptance and `--budgets auto`, and the offline policy replay.

Bugs these catch: node rows that mislabel the accepted path or exceed the cap, a summary without
ECE or the chosen-budget distribution, "auto" not parsed (or parsed where it makes no sense), an
auto cell shown as budget 0, a report without the reliability diagram, and a replay whose static
token counts ignore the prefix or whose auto arm fails to find the best budget on known curves.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from jetflow_bench.core.budget_policy import AUTO_COLUMN, DEFAULT_CANDIDATES, Budget
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.loop import NodeBlock
from jetflow_bench.projection.policy_replay import replay_arm
from jetflow_bench.report.loading import load_run
from jetflow_bench.report.plots import make_figures, reliability_diagram
from jetflow_bench.sweep.grid import Cell, parse_budgets
from jetflow_bench.sweep.tables import NODE_CAP, chosen_budgets, node_frame
from tests.helpers.fixtures_runs import write_fixture_run


def test_budgets_parse_auto_alone_or_beside_static_budgets():
    assert parse_budgets("16,auto") == (Budget.fixed(16), Budget.auto(DEFAULT_CANDIDATES))
    assert parse_budgets("auto", "16,4") == (Budget.auto((4, 16)),)
    assert parse_budgets("auto")[0].nodes == max(DEFAULT_CANDIDATES)  # auto drafts at its largest candidate
    with pytest.raises(JfbenchError, match="auto-budgets"):
        parse_budgets("auto", "4,auto")
    with pytest.raises(JfbenchError, match="budget 0 is out of range"):
        Budget.auto((0, 4))
    cell = Cell("gsm8k", "jetflow", "default", Budget.auto(), 1, 0)
    assert cell.cell_id == "gsm8k__jetflow__default__Bauto__bs1__r0"
    assert "B=auto" in cell.label()


def test_node_frame_marks_the_accepted_path_and_caps_each_tree():
    cell = Cell("gsm8k", "jetflow", "default", Budget.fixed(512), 1, 0)
    small = NodeBlock(0, 0, [0.0, -0.1, -0.2, -0.3], [-1, 0, 0, 1], [0, 1, 3])
    big = NodeBlock(0, 1, [0.0] + [-1.0] * 400, [-1] + list(range(400)), [0, 1])
    run = SimpleNamespace(nodes=[(7, small), (7, big)])
    frame = node_frame(cell, run)
    first = frame[frame["step"] == 0]
    assert first["node"].tolist() == [1, 2, 3] and first["accepted"].tolist() == [True, False, True]
    assert (frame["request"] == 7).all() and (frame["budget"] == 512).all()
    assert len(frame[frame["step"] == 1]) == NODE_CAP - 1  # root excluded


def test_chosen_budgets_share_per_auto_cell_only():
    keys = {"suite": "gsm8k", "drafter": "jetflow", "variant": "default", "batch_size": 1, "repeat": 0, "temperature": 0.0, "load": ""}
    steps = pd.DataFrame([{**keys, "budget": AUTO_COLUMN, "step_budget": b} for b in (4, 16, 16, 16)]
                         + [{**keys, "budget": 16, "step_budget": 16}])
    table = chosen_budgets(steps)
    assert table["chosen_budgets"].tolist() == ["4:0.25,16:0.75"]


def test_report_draws_a_reliability_diagram_from_nodes(tmp_path: Path):
    run = write_fixture_run(tmp_path / "run", drafters=("jetflow", "eagle"), suites=("gsm8k",), batch_sizes=(1,))
    rng = np.random.default_rng(0)
    claimed = rng.uniform(0.01, 1, 2000)
    nodes = pd.DataFrame({"suite": "gsm8k", "drafter": np.repeat(["jetflow", "eagle"], 1000), "variant": "default",
                          "budget": 16, "batch_size": 1, "repeat": 0, "request": 0, "step": np.arange(2000),
                          "node": 1, "parent": 0, "score": np.log(claimed), "accepted": rng.uniform(size=2000) < claimed})
    nodes.to_parquet(run / "nodes.parquet", index=False)
    figure = reliability_diagram(load_run(run))
    assert figure is not None and "ECE" in figure.figure.axes[0].get_title()
    assert "reliability" in [f.name for f in make_figures(load_run(run))]
    (run / "nodes.parquet").unlink()
    assert reliability_diagram(load_run(run)) is None


class FlatOrLinearCost:
    """A CostModel stand-in: verify = base + slope · N · b, AR = the verify of one token."""

    def __init__(self, base: float, slope: float) -> None:
        self.base, self.slope = base, slope

    def verify_s(self, n: float, b: int) -> float:
        return self.base + self.slope * n * b

    def bookkeeping_s(self, n: float, b: int) -> float:
        return 0.0

    def ar_s(self, b: int) -> float:
        return self.verify_s(1, b)


def geometric_steps(n_steps: int, decay: float, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    """Chains whose node k is accepted with probability decay^k (scores say exactly that)."""
    steps = []
    for _ in range(n_steps):
        scores = np.log(decay) * np.arange(256)  # root first
        run = 0
        while run < 255 and rng.uniform() < decay:
            run += 1
        accepted = np.arange(1, 256) <= run
        steps.append((scores, accepted))
    return steps


def test_replay_counts_tokens_of_the_prefix():
    steps = [(np.array([0.0, -0.1, -0.2, -0.3]), np.array([True, True, False]))]
    rows = replay_arm(steps, (1, 2, 4), 1, FlatOrLinearCost(1.0, 0.0), dict.fromkeys((1, 2, 4), 0.0))
    tau = {r["policy"]: r["tau"] for r in rows}
    assert (tau["1"], tau["2"], tau["4"]) == (1.0, 2.0, 3.0)


@pytest.mark.parametrize(("slope", "best"), [(0.0, 256), (0.02, 64), (0.2, 16)])
def test_replay_auto_finds_the_best_static_budget(slope, best):
    """Node k accepted w.p. 0.97^k: τ(B) = 1 + Σ_{k<B} 0.97^k ≈ 3.9, 12.9, 28.9, 33.3 at B = 4..256.
    Flat verify cost (a GPU at low load): 256 wins; steeper costs: 64, then 16."""
    steps = geometric_steps(400, 0.97, np.random.default_rng(3))
    candidates = (1, 4, 16, 64, 256)
    rows = replay_arm(steps, candidates, 1, FlatOrLinearCost(1.0, slope), dict.fromkeys(candidates, 0.1))
    statics = [r for r in rows if r["budget"] != AUTO_COLUMN]
    auto = next(r for r in rows if r["budget"] == AUTO_COLUMN)
    top = max(statics, key=lambda r: r["speedup"])
    assert top["budget"] == best
    assert auto["speedup"] >= 0.97 * top["speedup"]
    shares = dict(item.split(":") for item in auto["chosen_budgets"].split(","))
    assert float(shares[str(best)]) >= 0.9 and math.isfinite(auto["tau"])


def test_sweep_refuses_auto_for_drafters_without_log_prob_scores(cli, tmp_path: Path):
    code, _, err = cli("sweep", "--target", str(tmp_path), "--drafters", "ngram", "--budgets", "16,auto",
                       "--out", str(tmp_path / "out"))
    assert code == 2 and "ngram" in err and "log-prob" in err
    assert not (tmp_path / "out").exists()  # refused before anything ran
