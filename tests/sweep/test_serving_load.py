"""The load axis (`sweep --load`, `show --table load`): levels, arrivals, pairing, latency
definitions, break-even, and a run without a load keeping its hashes."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jetflow_bench.core.arms import AR_ARM
from jetflow_bench.core.budget_policy import AUTO_COLUMN, Budget
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.serving import RequestTimeline
from jetflow_bench.measure.serving import latency_stats, parse_slo, request_latency
from jetflow_bench.report.load import best_budgets, break_even, load_table
from jetflow_bench.report.loading import load_run
from jetflow_bench.report.plots import make_figures
from jetflow_bench.sweep import grid
from jetflow_bench.sweep.grid import (
    DrafterSpec,
    SweepConfig,
    cell_hash,
    cells,
    config_hash,
    settings_hash,
    spec_for,
)
from jetflow_bench.sweep.groups import pairing_groups
from jetflow_bench.sweep.load import arrivals, paired_with, parse_loads
from jetflow_bench.sweep.records import CellRun
from tests.helpers.data_dirs import benchmark_data_dir

CI_MANIFEST = Path(__file__).resolve().parents[2] / "results/baselines/ci/manifest.json"


def ci_config(**changes) -> SweepConfig:
    raw = json.loads(CI_MANIFEST.read_text())["config"]
    specs = tuple(DrafterSpec(**{**d, "options": tuple(map(tuple, d["options"])), "train": tuple(map(tuple, d["train"]))})
                  for d in raw["drafters"])
    return SweepConfig(**{**raw, "drafters": specs, "suites": tuple(raw["suites"]), "batch_sizes": tuple(raw["batch_sizes"]),
                          "budgets": tuple(Budget.fixed(b) for b in raw["budgets"]), "temperatures": tuple(raw["temperatures"]),
                          "extra": (), **changes})


def test_a_run_without_load_keeps_its_config_hash_cell_ids_and_cell_hashes(monkeypatch):
    # Bug caught: the load axis entering the hashes or ids of runs that have none, which would orphan
    # every finished cell of an earlier run. The pins are what the code before the axis computed for
    # the committed CI manifest (weights stubbed: the recorded paths exist only where it ran).
    monkeypatch.setattr(grid, "model_fingerprint", lambda p: f"weights-of:{Path(p).name}")
    config = ci_config()
    assert (config_hash(config), settings_hash(config)) == ("62624a6a1472", "eaa6f52f6325")
    ids = [(c.cell_id, cell_hash(config, c, spec_for(config, c))) for c in cells(config)]
    assert len(ids) == 22
    assert hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16] == "769523e1488c6fb4"
    loaded = ci_config(loads=("poisson:2",))
    assert config_hash(loaded) != config_hash(config)
    assert all(c.cell_id.endswith("__Lpoisson-2") for c in cells(loaded))


def test_load_levels_parse_to_canonical_names_and_bad_ones_are_one_line():
    assert parse_loads("poisson:1,2.5,INF,concurrency:4,8,poisson:1") == (
        "poisson:1", "poisson:2.5", "poisson:inf", "concurrency:4", "concurrency:8")
    for bad in ("4", "poisson:0", "concurrency:1.5", "concurrency:inf", "burst:3", "poisson:x", ","):
        with pytest.raises(JfbenchError, match="--load"):
            parse_loads(bad)


def test_poisson_arrivals_are_seeded_per_load_and_repeat_at_the_asked_rate():
    times = arrivals("poisson:4", 4000, seed=0, repeat=0)
    assert times == arrivals("poisson:4", 4000, seed=0, repeat=0) and times[0] == 0.0
    assert np.all(np.diff(times) >= 0)
    assert len(times) / times[-1] == pytest.approx(4, rel=0.05)  # requests per second
    assert times != arrivals("poisson:4", 4000, seed=0, repeat=1)
    assert arrivals("poisson:inf", 3, 0, 0) == [0.0, 0.0, 0.0]
    assert arrivals("concurrency:2", 3, 0, 0) is None  # closed loop: sent as slots free


def test_load_cells_pair_with_plain_decoding_at_the_same_load():
    # Bug caught: an arm under load divided by plain decoding at another load (or unloaded).
    config = ci_config(loads=("concurrency:1", "poisson:2"), suites=("gsm8k",))
    grid_cells = list(cells(config))
    for cell in grid_cells:
        assert cell.baseline in grid_cells and cell.baseline.load == cell.load
    groups = pairing_groups(grid_cells)
    assert {g.group_id for g in groups} == {"gsm8k__bs1__Lconcurrency-1", "gsm8k__bs1__Lpoisson-2"}
    assert all(len({c.load for c in g.cells}) == 1 for g in groups)


def test_an_arm_under_load_carries_plain_decodings_times_and_its_aa_copy_from_its_own_session():
    # Bug caught: a load arm paired with the stored AR cell (timed in another session), with another
    # request's times, or with the A/A copy's times where plain decoding's belong. Plain decoding's
    # request 7: sent 0, first chunk 0.5, last 2.5; its A/A copy's: first chunk 0.6, last 2.2.
    def run(timelines):
        return CellRun([], {t.request: None for t in timelines}, 3.0, 0, 100.0, 103.0,
                       timelines={t.request: t for t in timelines})

    base = run([RequestTimeline(7, 0.0, 0.0, False, [(0.5, 1), (2.5, 4)]),
                RequestTimeline(9, 1.0, 1.0, True, [(1.2, 1), (1.4, 2)])])
    twin = run([RequestTimeline(7, 0.0, 0.0, False, [(0.6, 1), (2.2, 4)]),
                RequestTimeline(9, 1.0, 1.0, True, [(1.3, 1), (1.4, 2)])])
    arm = paired_with(run([RequestTimeline(7, 0.0, 0.0, False, [(0.4, 1), (1.0, 4)]),
                           RequestTimeline(9, 1.0, 1.0, True, [(1.1, 1), (1.2, 2)])]), base, twin, "s2")
    assert arm.paired[7] == {"session": "s2", "batch_started": 100.0, "base_ttft_s": pytest.approx(0.5),
                             "base_decode_s": pytest.approx(2.0), "aa_ttft_s": pytest.approx(0.6),
                             "aa_decode_s": pytest.approx(1.6)}
    assert arm.paired[9]["base_decode_s"] == pytest.approx(0.2) and arm.paired[9]["aa_decode_s"] == pytest.approx(0.1)
    assert arm.base_wall_s == 3.0


def test_the_load_tables_speedups_divide_by_the_paired_times_not_the_stored_ar_cell():
    # Bug caught: --table load dividing by the AR cell's own rows, which may come from another
    # session (an arm added to a finished run). The stored AR cell: TPOT 0.1 s, wall 2 s; the AR
    # run timed beside the arm: decode 0.8 s over 5 tokens (TPOT 0.2 s), wall 3 s.
    keys = {"suite": "s", "variant": "default", "batch_size": 2, "temperature": 0.0, "load": "poisson:2", "repeat": 0}
    rows, cell_rows = [], []
    for drafter, budget, tpot, wall, base_decode, base_wall in (("ar", 1, 0.1, 2.0, 0.4, 2.0), ("ngram", 8, 0.05, 1.0, 0.8, 3.0)):
        for request in range(2):
            rows.append({**keys, "drafter": drafter, "budget": budget, "request": request, "new_tokens": 5, "emitted": 5,
                         "steps": 2, "ttft_s": 0.1, "tpot_s": tpot, "e2el_s": 0.1 + 4 * tpot, "itl_s": [tpot],
                         "base_decode_s": base_decode})
        cell_rows.append({**keys, "drafter": drafter, "budget": budget, "wall_s": wall, "base_wall_s": base_wall})
    table = load_table(pd.DataFrame(rows), pd.DataFrame(cell_rows), {}, n_boot=10).set_index("drafter")
    assert table.loc["ngram", "tpot_speedup"] == pytest.approx(4.0)  # 0.2 / 0.05, not 0.1 / 0.05
    assert table.loc["ngram", "tput_speedup"] == pytest.approx(3.0)  # (10 / 1) / (10 / 3), not / (10 / 2)
    unpaired = load_table(pd.DataFrame(rows).assign(base_decode_s=np.nan), pd.DataFrame(cell_rows), {}, n_boot=10)
    assert unpaired["tpot_speedup"].isna().all()  # a τ-only run, or one recorded before pairing: no speed-up


def test_latency_follows_vllm_bench_serve_definitions():
    # Sent at 1.0; chunks of 1 (prefill), 3 and 2 tokens at 1.5, 1.7, 2.1: TTFT 0.5, E2EL 1.1,
    # TPOT (1.1 - 0.5) / 5, one ITL per chunk after the first.
    got = request_latency(1.0, [(1.5, 1), (1.7, 3), (2.1, 2)])
    assert got["ttft_s"] == pytest.approx(0.5) and got["e2el_s"] == pytest.approx(1.1)
    assert got["tpot_s"] == pytest.approx(0.6 / 5)
    assert got["itl_s"] == pytest.approx([0.2, 0.4])
    assert math.isnan(request_latency(0.0, [(0.3, 1)])["tpot_s"])  # one token: no TPOT


def test_goodput_counts_requests_within_every_slo():
    requests = pd.DataFrame({"ttft_s": [0.1, 0.2, 0.9], "tpot_s": [0.01, 0.05, 0.01], "e2el_s": [1.0, 2.0, 2.0],
                             "itl_s": [[0.01], [0.05, 0.05], []], "new_tokens": [10, 20, 30]})
    stats = latency_stats(requests, wall_s=2.0, slo=parse_slo("ttft=0.5,tpot=0.02"))
    assert stats["goodput"] == pytest.approx(0.5)  # only the first request meets both, over 2 s
    assert stats["output_tok_s"] == pytest.approx(30.0)
    assert stats["itl_median_s"] == pytest.approx(0.05)
    assert stats["ttft_p99_s"] == pytest.approx(np.percentile([0.1, 0.2, 0.9], 99))
    with pytest.raises(JfbenchError, match="--slo"):
        parse_slo("ttft=fast")


def _level_rows(speedups_by_budget, noise=(0.95, 1.05)) -> pd.DataFrame:
    rows = []
    for budget, speedups in speedups_by_budget:
        for (level, (s, lo)) in zip((1.0, 4.0, 16.0), speedups, strict=True):
            rows.append({"suite": "gsm8k", "drafter": "ngram", "variant": "default", "budget": budget, "batch_size": 8,
                         "temperature": 0.0, "load": f"poisson:{level:g}", "load_kind": "poisson", "load_level": level,
                         "tpot_speedup": s, "tpot_speedup_lo": lo, "tpot_speedup_hi": s + 0.2,
                         "clear_of_noise": lo > noise[1] or s + 0.2 < noise[0]})
    return pd.DataFrame(rows)


def test_break_even_is_the_first_level_whose_ci_reaches_one_or_the_noise_band_and_best_budget_per_level():
    table = _level_rows(((4, [(1.8, 1.5), (1.3, 1.1), (1.05, 0.9)]), (16, [(2.2, 1.9), (1.2, 0.95), (0.8, 0.7)])))
    even = break_even(table).set_index("budget")
    assert even["break_even"][4] == "poisson:16" and even["break_even"][16] == "poisson:4"
    assert even["pays_at"][4] == "poisson:1,poisson:4" and even["pays_at"][16] == "poisson:1"
    # An arm that pays only under load: break-even at the lowest level, and where it pays beside it.
    late = break_even(_level_rows(((4, [(0.9, 0.8), (1.3, 1.1), (1.4, 1.2)]),))).iloc[0]
    assert late["break_even"] == "<= poisson:1 (not shown to pay at the lowest level)" and late["pays_at"] == "poisson:4,poisson:16"
    best = best_budgets(table).set_index("load")["budget"]
    assert best.to_dict() == {"poisson:1": 16, "poisson:4": 4, "poisson:16": 4}
    # A noise band of [0.8, 1.2]: budget 4's 1.3 [1.1, 1.5] at poisson:4 overlaps it, so it no longer shows.
    noisy = _level_rows(((4, [(1.8, 1.5), (1.3, 1.1), (1.05, 0.9)]),), noise=(0.8, 1.2))
    assert break_even(noisy).set_index("budget")["break_even"][4] == "poisson:4"


def test_the_aa_noise_floor_at_a_load_is_plain_decoding_against_its_second_copy():
    # Bug caught: a load cell's noise floor taken from the arm's times, or missing. Plain decoding's
    # TPOT 0.2 s (decode 0.8 s over 5 tokens); its A/A copy's 0.25 s (decode 1.0 s): floor 0.8.
    keys = {"suite": "s", "variant": "default", "batch_size": 2, "temperature": 0.0, "load": "poisson:2", "repeat": 0}
    rows = [{**keys, "drafter": drafter, "budget": budget, "request": r, "new_tokens": 5, "emitted": 5, "steps": 2,
             "ttft_s": 0.1, "tpot_s": tpot, "e2el_s": 0.1 + 4 * tpot, "itl_s": [tpot], "base_decode_s": 0.8, "aa_decode_s": 1.0}
            for drafter, budget, tpot in (("ar", 1, 0.2), ("ngram", 8, 0.05)) for r in range(3)]
    cells = pd.DataFrame([{**keys, "drafter": d, "budget": b, "wall_s": 1.0, "base_wall_s": 1.0} for d, b in (("ar", 1), ("ngram", 8))])
    table = load_table(pd.DataFrame(rows), cells, {}, n_boot=10).set_index("drafter")
    assert table.loc["ngram", "noise_aa"] == pytest.approx(0.8) and table.loc["ngram", "tpot_speedup"] == pytest.approx(4.0)
    assert bool(table.loc["ngram", "clear_of_noise"])
    before = load_table(pd.DataFrame(rows).drop(columns="aa_decode_s"), cells, {}, n_boot=10)
    assert before["noise_aa"].isna().all() and before["clear_of_noise"].isna().all()  # recorded before the A/A copy


def test_best_budgets_put_the_auto_policy_beside_the_best_static_budget_at_each_level():
    # Bug caught: the auto cell (budget column 0) winning "best static budget", or auto left out.
    table = _level_rows(((4, [(1.8, 1.5), (1.3, 1.1), (1.05, 0.9)]), (16, [(2.2, 1.9), (1.2, 0.95), (0.8, 0.7)]),
                         (AUTO_COLUMN, [(2.1, 1.8), (3.0, 2.9), (0.9, 0.8)])))
    summary = pd.DataFrame([{"suite": "gsm8k", "drafter": "ngram", "variant": "default", "budget": AUTO_COLUMN, "batch_size": 8,
                             "temperature": 0.0, "load": load, "repeat": 0, "chosen_budgets": shares}
                            for load, shares in (("poisson:1", "16:0.90,4:0.10"), ("poisson:4", "4:1.00"), ("poisson:16", "4:1.00"))])
    best = best_budgets(table, summary).set_index("load")
    assert best["budget"].to_dict() == {"poisson:1": 16, "poisson:4": 4, "poisson:16": 4}
    assert best.loc["poisson:1", "auto_speedup"] == pytest.approx(2.1) and best.loc["poisson:1", "chosen_budgets"] == "16:0.90,4:0.10"
    assert best["auto_tied"].tolist() == [True, False, True]  # at poisson:4 auto's [2.9, 3.2] lies above 4's [1.1, 1.5]


@pytest.mark.slow
def test_a_load_sweep_is_lossless_resumable_and_shows_its_load_table(micro_target, learned_heads, tmp_path, cli):
    out = tmp_path / "load"  # a learned head: ngram finds nothing to copy in the made-up data's prompts
    args = ["sweep", "--target", str(micro_target), "--out", str(out), "--drafters", f"jetflow={learned_heads['jetflow']}",
            "--suites", "gsm8k",
            "--budgets", "8,auto", "--auto-budgets", "2,8", "--batch-sizes", "3", "--repeats", "1", "--limit", "5",
            "--max-new-tokens", "16", "--data-dir", str(benchmark_data_dir()), "--threads", "1", "--no-progress",
            "--device", "cpu", "--load", "poisson:inf,concurrency:2"]
    code, _, err = cli(*args)
    assert code == 0, err
    summary = pd.read_parquet(out / "summary.parquet")
    assert sorted(summary["load"]) == ["concurrency:2"] * 3 + ["poisson:inf"] * 3
    kept = out / "heads" / "jetflow.config.json"  # the run keeps its head's record beside its tables
    assert kept.read_text() == (learned_heads["jetflow"] / "config.json").read_text()
    assert summary.loc[summary["budget"] == AUTO_COLUMN, "chosen_budgets"].notna().all()  # the policy ran under load
    assert summary["lossless_unexcused"].sum() == 0
    assert summary.loc[summary["drafter"] != AR_ARM, "accepted"].min() > 0, "drafts must be accepted"
    requests = pd.read_parquet(out / "requests.parquet")
    assert requests["tpot_s"].notna().all() and (requests["e2el_s"] >= requests["ttft_s"]).all()
    assert requests[["base_decode_s", "base_ttft_s", "aa_decode_s"]].notna().all(axis=None)  # paired in its session
    assert summary["speedup_decode_micro"].notna().all() and set(summary["pairing"]) == {"interleaved"}
    code, stdout, err = cli(*args)
    assert code == 0 and "0 cell(s) run, 6 already done" in stdout + err  # resumed: nothing decoded again
    first = json.loads((out / "manifest.json").read_text())["sessions"][0]["session"]
    code, stdout, err = cli(*[a if a != "8,auto" else "8,4,auto" for a in args])  # a budget added to the finished run
    assert code == 0 and "2 cell(s) run, 6 already done" in stdout + err, err
    second = json.loads((out / "manifest.json").read_text())["sessions"][-1]["session"]
    requests = pd.read_parquet(out / "requests.parquet")
    added = requests[requests["budget"] == 4]
    assert set(added["session"]) == {second} and added["base_decode_s"].notna().all()  # AR served again beside it
    assert set(requests.loc[requests["drafter"] == AR_ARM, "session"]) == {first}  # the stored AR cell is kept
    code, stdout, err = cli("show", str(out), "--table", "load", "--slo", "ttft=10,tpot=10")
    assert code == 0, err
    assert "break-even load" in stdout and "TPOT × [95% CI]" in stdout and "best budget per load level" in stdout
    assert "A/A [95% CI]" in stdout and "auto: TPOT × [95% CI]" in stdout
    figures = {f.name: f for f in make_figures(load_run(out))}
    assert "speedup_vs_load" in figures and "speedup_vs_budget" not in figures  # load cells are not batch cells
    code, _, err = cli("show", str(out), "--table", "load", "--slo", "ttft")
    assert code == 2 and err.count("\n") == 1 and "--slo" in err


@pytest.mark.parametrize(("flags", "message"), [
    (["--load", "burst:3"], "--load 'burst:3': write poisson:RATE"),
    (["--load", "concurrency:8", "--batch-sizes", "2"], "raise --batch-sizes to at least 8"),
    (["--load", "poisson:2", "--compile"], "drop --compile"),
])
def test_a_load_the_engine_cannot_serve_is_one_line_before_anything_runs(tmp_path, cli, flags, message):
    code, _, err = cli("sweep", "--target", str(tmp_path), "--out", str(tmp_path / "run"), "--drafters", "ngram",
                       "--device", "cpu", *flags)
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()
