"""In-session pairing: a sweep times each pairing group's AR baseline, arms and an A/A copy of the
baseline interleaved, batch by batch, and a speed-up divides only by the baseline timed beside it.

The bugs: cells ran one after another (load drift between the baseline and an arm entered the ratio);
an arm added to a finished run was divided by the baseline timed in the first session; nothing
showed how far two timings of the same thing drift (no noise floor).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jetflow_bench.measure.metrics import paired_ratio_ci
from jetflow_bench.sweep import driver
from tests.helpers.cli import jfbench
from tests.helpers.data_dirs import benchmark_data_dir
from tests.helpers.random_models import save_random_model

DATA = benchmark_data_dir()


def args(target: Path, out: Path, *extra: str, drafters: str = "ngram", budgets: str = "4,8") -> list[str]:
    return ["sweep", "--target", str(target), "--out", str(out), "--drafters", drafters, "--suites", "gsm8k",
            "--budgets", budgets, "--batch-sizes", "1", "--limit", "2", "--max-new-tokens", "8",
            "--data-dir", str(DATA), "--threads", "1", "--no-progress", *extra]


def counted_sweep(argv: list[str]) -> tuple[list[str], str]:
    """Run the sweep, recording the cell of every timed batch decode; (those cell ids, stderr)."""
    calls: list[str] = []
    real = driver.decode_batch

    def decode_batch(engine, cell, *rest, **kwargs):
        calls.append(cell.cell_id)
        return real(engine, cell, *rest, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(driver, "decode_batch", decode_batch)
        code, _, err = jfbench(*argv)
    assert code == 0, err
    return calls, err


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    return save_random_model(tmp_path_factory.mktemp("target") / "rand")


@pytest.fixture(scope="module")
def timed(target, tmp_path_factory) -> tuple[Path, list[str]]:
    """A sweep with the default --repeats (3): AR and ngram at B = 4 and 8, 2 prompts of batch 1."""
    out = tmp_path_factory.mktemp("runs") / "timed"
    calls, _ = counted_sweep(args(target, out))
    return out, calls


def test_rounds_interleave_the_baseline_every_arm_and_an_aa_copy_rotated_per_repeat(timed):
    out, calls = timed
    requests = pd.read_parquet(out / "requests.parquet")
    assert sorted(requests["repeat"].unique()) == [0, 1, 2]  # --repeats defaults to 3
    # 3 repeats x 2 rounds x 4 slots: AR, ngram B4, ngram B8 and AR again (the A/A copy)
    assert len(calls) == 24 and sum("__ar__" in c for c in calls) == 12
    arm = requests["drafter"] + requests["budget"].astype(str)
    sequences = [arm[requests["repeat"] == r].iloc[np.argsort(requests.loc[requests["repeat"] == r, "batch_started"])]
                 .tolist() for r in range(3)]
    # one prompt batch per cell per round, round-robin over [AR, ngram B4, ngram B8, AR's A/A copy],
    # the order rotated by one slot per repeat; the AR cell keeps the first AR decode of even rounds
    # and the second of odd ones, so neither copy always follows the arms
    assert sequences == [["ar1", "ngram4", "ngram8", "ngram4", "ngram8", "ar1"], ["ngram4", "ngram8", "ar1"] * 2,
                         ["ngram8", "ar1", "ngram4"] * 2]
    ar = requests[requests["drafter"] == "ar"].set_index(["repeat", "request"])
    for _, row in requests[requests["drafter"] == "ngram"].iterrows():
        # paired with the AR decode of its own round, which is the AR cell's own time
        assert row["base_decode_s"] == ar.loc[(row["repeat"], row["request"]), "decode_s"]
        assert row["aa_decode_s"] == ar.loc[(row["repeat"], row["request"]), "aa_decode_s"]
    assert requests["aa_decode_s"].notna().all() and requests["session"].nunique() == 1


def test_show_prints_the_noise_floor_and_what_the_speedups_rest_on(timed):
    out, _ = timed
    code, shown, err = jfbench("show", out)
    assert code == 0, err
    assert "noise floor: A/A " in shown and "(AR timed against itself, 6 pairs)" in shown
    assert "3 repeat(s), 1 session(s)" in shown
    summary = pd.read_parquet(out / "summary.parquet")
    assert summary["pairing"].eq("interleaved").all() and summary["speedup_arm"].notna().all()
    assert summary.loc[summary["drafter"] == "ar", "speedup_arm"].eq(1.0).all()
    requests = pd.read_parquet(out / "requests.parquet")
    ngram = requests[(requests["drafter"] == "ngram") & (requests["budget"] == 4)]
    pooled = summary.loc[(summary["drafter"] == "ngram") & (summary["budget"] == 4), "speedup_arm"].iloc[0]
    assert pooled == pytest.approx(ngram["base_decode_s"].sum() / ngram["decode_s"].sum())  # repeats pooled


def test_an_arm_added_in_a_second_session_is_paired_with_that_sessions_baseline(timed, target, tmp_path):
    out = Path(shutil.copytree(timed[0], tmp_path / "run"))
    first = pd.read_parquet(out / "requests.parquet")
    calls, err = counted_sweep(args(target, out, drafters="ngram,ngram[max_ngram=2]", budgets="4"))
    assert "3 cell(s) run" in err
    # per round: AR timed again beside the new arm, the new arm, the A/A copy; the old arm is not re-run
    assert len(calls) == 18 and not any("__ngram__default__" in c for c in calls)
    sessions = [s["session"] for s in json.loads((out / "manifest.json").read_text())["sessions"]]
    requests = pd.read_parquet(out / "requests.parquet")
    new = requests[requests["variant"] == "max_ngram=2"]
    assert len(new) == 6 and new["session"].eq(sessions[1]).all()
    old_ar = first[first["drafter"] == "ar"].set_index(["repeat", "request"])["decode_s"]
    fresh = new.set_index(["repeat", "request"])["base_decode_s"]
    assert not fresh.isin(old_ar.to_numpy()).any()  # the fresh baseline, not the first session's AR cell
    summary = pd.read_parquet(out / "summary.parquet")
    cell = summary[(summary["variant"] == "max_ngram=2") & (summary["repeat"] == 1)].iloc[0]
    rows = new[new["repeat"] == 1]
    assert cell["speedup_decode_micro"] == pytest.approx(paired_ratio_ci(rows["base_decode_s"], rows["decode_s"])["micro"])
    code, shown, _ = jfbench("show", out)
    assert code == 0 and "3 repeat(s), 2 session(s)" in shown and "(AR timed against itself, 12 pairs)" in shown


def test_tau_only_times_no_baseline_and_claims_no_speedup(target, tmp_path):
    out = tmp_path / "tau"
    calls, _ = counted_sweep(args(target, out, "--tau-only", budgets="4"))
    assert len(calls) == 4  # one repeat, 2 rounds x (AR, ngram): no baseline copies
    summary = pd.read_parquet(out / "summary.parquet")
    assert summary["pairing"].eq("tau-only").all() and summary["tau"].notna().all()
    assert summary.filter(like="speedup_decode").isna().all(axis=None) and summary["noise_aa"].isna().all()
    code, shown, _ = jfbench("show", out)
    assert code == 0 and "– τ-only" in shown and "no speed-up: a τ-only run times no baseline" in shown
    code, _, err = jfbench(*args(target, tmp_path / "bad", "--tau-only", "--repeats", "5"))
    assert code == 2 and err.count("\n") == 1 and "--tau-only runs one repeat" in err


def test_cells_recorded_before_pairing_are_kept_and_show_no_speedup(timed, target, tmp_path):
    out = Path(shutil.copytree(timed[0], tmp_path / "old"))
    cell = "gsm8k__ngram__default__B8__bs1__r2"
    part = out / "cells" / f"{cell}.requests.parquet"
    old = pd.read_parquet(part)
    old.drop(columns=["session", "batch_started", "base_decode_s", "base_ttft_s", "aa_decode_s", "aa_ttft_s"]).to_parquet(part)
    record = json.loads((out / "cells" / f"{cell}.json").read_text())
    del record["pairing"]
    (out / "cells" / f"{cell}.json").write_text(json.dumps(record))
    calls, err = counted_sweep(args(target, out))
    assert not calls and "0 cell(s) run, 9 already done" in err  # sound, not redone
    summary = pd.read_parquet(out / "summary.parquet")
    ngram8 = summary[(summary["drafter"] == "ngram") & (summary["budget"] == 8)]
    assert ngram8["speedup_arm"].isna().all()  # a repeat without its paired baseline: no pooled speed-up
    assert ngram8.loc[ngram8["repeat"] == 2, "speedup_decode_micro"].isna().all()
    assert ngram8.loc[ngram8["repeat"] < 2, "speedup_decode_micro"].notna().all()
    code, shown, _ = jfbench("show", out)
    line = next(x for x in shown.splitlines() if " ngram " in x and " 8 " in x)
    assert code == 0 and "– unpaired" in line
