"""`--engine sim`: a τ-only sweep whose drafter cells are simulated from the AR cell's outputs.

The bugs: a simulated cell whose τ, acceptance or drafting counters differ from the hf engine's run
of the same grid (features fed for the wrong positions, the batch's finished rows not dropped, the
bonus miscounted); a simulated cell that reports a throughput or a losslessness it never measured;
a sim sweep that would time or sample anything.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.helpers.cli import jfbench
from tests.helpers.data_dirs import benchmark_data_dir
from tests.helpers.random_models import save_random_model

COUNTERS = ["request", "step", "batch_step", "active", "drafted", "accepted", "emitted", "depth", "draft_passes",
            "draft_entries"]


def sweep(target: Path, out: Path, drafters: str, *extra: str) -> list[str]:
    return ["sweep", "--target", str(target), "--out", str(out), "--drafters", drafters, "--suites", "gsm8k",
            "--budgets", "8,32", "--batch-sizes", "2", "--limit", "4", "--max-new-tokens", "24",
            "--data-dir", str(benchmark_data_dir()), "--threads", "1", "--no-progress", *extra]


@pytest.mark.slow
def test_simulated_cells_carry_the_engines_counters_and_no_times(micro_target, learned_heads, tmp_path):  # noqa: F811
    drafters = f"jetflow={learned_heads['jetflow']},ngram"
    for engine in ("hf", "sim"):
        code, _, err = jfbench(*sweep(micro_target, tmp_path / engine, drafters, "--tau-only", "--engine", engine))
        assert code == 0, err
    hf, sim = (pd.read_parquet(tmp_path / e / "summary.parquet").set_index(["drafter", "budget"]).sort_index()
               for e in ("hf", "sim"))
    drafted = sim.index.get_level_values("drafter") != "ar"
    assert sim.loc[drafted, "engine"].eq("sim").all() and sim.loc[~drafted, "engine"].eq("hf").all()
    assert hf.loc[drafted, "accepted"].gt(0).any(), "drafts must be accepted, or the comparison proves nothing"
    for column in ("tau", "accepted", "alpha", "a_1", "a_2", "p_1", "p_2", "new_tokens", "drafted_mean", "draft_entries"):
        pd.testing.assert_series_equal(sim[column], hf[column])
    unmeasured = ["tokens_per_s", "verify_s", "lossless_unexcused", "lossless_excused", "rank1_faithful"]
    assert sim.loc[drafted, unmeasured].isna().all(axis=None)
    assert hf[["lossless_unexcused"]].eq(0).all(axis=None) and sim.loc[~drafted, "tokens_per_s"].notna().all()
    steps = {e: pd.read_parquet(tmp_path / e / "steps.parquet").sort_values(["drafter", "budget", "request", "step"])
             for e in ("hf", "sim")}
    real, simulated = (s[s["drafter"] != "ar"].reset_index(drop=True) for s in (steps["hf"], steps["sim"]))
    pd.testing.assert_frame_equal(simulated[COUNTERS], real[COUNTERS])
    assert simulated["timing"].eq("none").all() and simulated["verify_s"].isna().all()
    code, shown, err = jfbench("show", tmp_path / "sim")
    assert code == 0 and shown.count("– sim") == 4, shown  # the four drafter rows' `diverged`: not checked
    code, shown, err = jfbench("show", tmp_path / "sim", "--table", "headroom")
    assert code == 0 and "jetflow" in shown, err
    code, _, err = jfbench("report", tmp_path / "sim", "--out", tmp_path / "report.html")
    assert code == 0, err
    assert "4 simulated cells (--engine sim) not checked" in (tmp_path / "report.html").read_text()


@pytest.mark.parametrize(("extra", "says"), [
    ((), "--engine sim times nothing"),
    (("--tau-only", "--temperature", "0.7"), "--engine sim simulates greedy decoding"),
    (("--tau-only", "--budgets", "8,auto"), "--engine sim needs fixed budgets"),
])
def test_a_sim_sweep_refuses_what_it_cannot_simulate(tmp_path, extra, says):
    target = save_random_model(tmp_path / "rand")
    code, _, err = jfbench(*sweep(target, tmp_path / "run", "ngram", "--engine", "sim", *extra))
    assert code == 2 and err.count("\n") == 1 and says in err, err
    assert not (tmp_path / "run").exists()
