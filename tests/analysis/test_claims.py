"""Claim verdicts computed from effects and their CIs (`jetflow_bench.report.claims`)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.report.claims import (
    VERDICTS,
    Effect,
    check_twins,
    claim1,
    claim1_paper,
    claim2,
    claim2_twins,
    load_requests,
    verdict,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("lo", "hi", "paper", "reachable", "expected"), [
    (0.02, 0.09, 0.05, None, "reproduced"),  # excludes zero, holds the paper's effect
    (0.06, 0.09, 0.05, None, "reproduced"),  # larger than the paper's
    (0.001, 0.05, 0.05, None, "reproduced"),  # boundary: hi = P still holds P
    (0.0, 0.09, 0.05, None, "inconclusive"),  # boundary: lo = 0 does not exclude zero
    (-0.02, 0.09, 0.05, None, "inconclusive"),  # holds both zero and P
    (-0.02, 0.049, 0.05, None, "contradicted"),  # excludes P from below, holds zero
    (0.01, 0.03, 0.05, None, "contradicted"),  # a real effect, but smaller than the paper's
    (-0.09, -0.02, 0.05, None, "contradicted"),  # reversed
    (-0.09, 0.02, -0.05, None, "inconclusive"),  # a negative paper effect: oriented by its sign
    (-0.09, -0.06, -0.05, None, "reproduced"),
    (0.03, 0.09, -0.05, None, "contradicted"),
    (-0.02, 0.02, 0.05, 0.04, "untestable here"),  # the setup could not show 0.05
    (-0.02, 0.02, 0.05, 0.05, "contradicted"),  # boundary: reachable = P is testable
    (0.02, 0.09, 0.05, 0.049, "untestable here"),  # even a positive CI: the headroom says it cannot be the paper's effect
])
def test_verdict_rule_and_its_boundaries(lo, hi, paper, reachable, expected):
    assert verdict(Effect((lo + hi) / 2, lo, hi), paper, reachable) == expected
    assert expected in VERDICTS


def test_a_verdict_needs_a_paper_effect_and_a_ci():
    with pytest.raises(ValueError):
        verdict(Effect(0.0, -1.0, 1.0), 0.0)
    with pytest.raises(ValueError):
        verdict(Effect(0.0, float("nan"), 1.0), 0.05)


def _requests(taus: dict[tuple[str, str, int], float], seeds=(0, 1), prompts=8, steps=10) -> pd.DataFrame:
    """Per-request rows whose every prompt has τ = taus[arm] (steps 10, emitted 10 τ), in one run per seed."""
    rows = []
    for seed in seeds:
        for (drafter, variant, budget), t in taus.items():
            for request in range(prompts):
                rows.append({"run": f"main-s{seed}", "suite": "gsm8k", "drafter": drafter, "variant": variant,
                             "budget": budget, "request": request, "steps": steps, "emitted": round(t * steps)})
    return pd.DataFrame(rows)


def _loaded(frame: pd.DataFrame, tmp_path: Path) -> pd.DataFrame:
    folder = tmp_path / "claims"
    folder.mkdir(exist_ok=True)
    frame.to_csv(folder / "requests.csv.gz", index=False)
    return load_requests([folder])


def test_claim1_is_the_difference_of_matched_tau_ratios(tmp_path):
    taus = {("jetflow", "default", 64): 2.0, ("jetflow", "default", 256): 3.0,
            ("dflash", "default", 64): 2.0, ("dflash", "default", 256): 2.0}
    rows = _loaded(_requests(taus), tmp_path)
    [row] = claim1(rows)
    assert row["effect"] == pytest.approx(3.0 / 2.0 - 2.0 / 2.0) and row["lo"] == pytest.approx(0.5)  # no spread
    assert (row["seeds"], row["prompts"], row["verdict"]) == (2, 8, "reproduced")
    assert row["paper"] == pytest.approx(8.62 / 7.77 - 6.56 / 6.18) == pytest.approx(claim1_paper("gsm8k"))
    [row] = claim1(rows, headroom={("gsm8k", "jetflow"): 2.05})  # tau_inf: JetFlow could gain 0.05 past B = 64
    assert row["reachable"] == pytest.approx(0.05 / 2.0) and row["verdict"] == "untestable here"
    [row] = claim1(rows, depth2={"gsm8k": 0.5})
    assert row["reachable"] == pytest.approx(0.25) and "a_2" in row["reachable_from"]


def test_claim_effects_pair_seeds_and_prompts_and_resample_both(tmp_path):
    rng = np.random.default_rng(0)
    frame = _requests({("jetflow", "layout=prefix", 16): 2.0, ("jetflow", "head=bidirectional", 16): 2.0}, seeds=(0, 1, 2))
    frame["variant"] = [v if run == "main-s0" else f"{v},seed={run[-1]}" for v, run in zip(frame["variant"], frame["run"],
                                                                                              strict=True)]
    frame["run"] = "abl-gsm8k"  # one ablation run, seeds in the variants
    frame["emitted"] += rng.integers(-3, 4, len(frame))
    rows = _loaded(frame, tmp_path)
    [row] = claim2(rows, gamma=0)
    causal = frame[frame["variant"].str.startswith("layout")]
    bidir = frame[frame["variant"].str.startswith("head")]
    expected = (causal["emitted"].sum() / causal["steps"].sum()) / (bidir["emitted"].sum() / bidir["steps"].sum()) - 1
    assert row["effect"] == pytest.approx(expected) and (row["seeds"], row["prompts"]) == (3, 8)
    assert row["lo"] < row["effect"] < row["hi"]
    assert row["verdict"] == "contradicted"  # the paper's gamma = 0 gap (9.46 / 4.84) is far outside the CI
    # a base on jetflow's all-mask default: the bidirectional variant is compared with the base itself
    frame["variant"] = frame["variant"].str.replace("layout=prefix,", "").str.replace("layout=prefix", "default")
    (tmp_path / "mask").mkdir()
    [row] = claim2(_loaded(frame, tmp_path / "mask"), gamma=0)
    assert row["effect"] == pytest.approx(expected) and (row["seeds"], row["prompts"]) == (3, 8)


def test_claims_command_reads_the_committed_claims_folders(cli):
    folder = ROOT / "results" / "baselines" / "toy-quality-bar" / "claims"
    code, text, err = cli("claims", str(folder), "--format", "csv")
    assert code == 0, err
    table = pd.read_csv(io.StringIO(text))
    assert set(table["claim"]) == {1, 2} and set(table["suite"]) == {"gsm8k", "math500"}
    assert table["verdict"].isin(VERDICTS).all() and (table["seeds"] == 3).all() and (table["prompts"] == 64).all()
    code, text, err = cli("claims", str(folder.parent))
    assert code == 2 and text == "" and err.count("\n") == 1 and "requests.csv.gz" in err
    other = ROOT / "results" / "baselines" / "smollm2" / "claims"  # another target's runs of the same names
    code, text, err = cli("claims", str(folder), str(other))
    assert code == 2 and text == "" and "head seed 0 in several runs" in err and "smollm2/claims/main-s0" in err


def _claim1_run(tmp_path: Path, dflash_recipe: dict, jetflow_recipe: dict, stop: str = "time limit") -> Path:
    """A claim-1 run folder whose manifest names two head folders with these training recipes (the
    dflash head stopped for ``stop``)."""
    run = tmp_path / "claim1-s0"
    run.mkdir(parents=True)
    drafters = []
    for name, recipe in (("dflash", dflash_recipe), ("jetflow", jetflow_recipe)):
        head = tmp_path / f"head-{name}"
        head.mkdir()
        record = {"config": {"drafter": name, "layout": None if name == "dflash" else "mask"},  # as given: dflash's unset
                  "recipe": {"drafter": name, **recipe}, "stop_reason": stop if name == "dflash" else "time limit"}
        (head / "config.json").write_text(json.dumps({"training": record}))
        drafters.append({"name": name, "variant": "default", "checkpoint": str(head)})
    (run / "manifest.json").write_text(json.dumps({"config": {"drafters": drafters}}))
    return run


def test_claim2_from_claim1_runs_pairs_jetflow_with_its_dflash_twin(tmp_path):
    frame = _requests({("jetflow", "default", 64): 3.0, ("dflash", "default", 64): 2.0})
    [row] = claim2_twins(_loaded(frame, tmp_path), gamma=0)
    assert row["effect"] == pytest.approx(3.0 / 2.0 - 1) and (row["seeds"], row["prompts"]) == (2, 8)
    assert "dflash twin" in row["contrast"] and row["paper"] == pytest.approx(9.46 / 4.84 - 1)
    assert claim2(_loaded(frame, tmp_path), gamma=0) == []  # without the flag, no jetflow[head=bidirectional]: no row

    recipe = {"layout": "mask", "decay": 7.0, "seed": 0}
    twin = _claim1_run(tmp_path / "twin", {**recipe, "head": "bidirectional"}, {**recipe, "head": "causal"})
    assert check_twins([twin, tmp_path / "claims"]) == [tmp_path / "claims"]  # a collected folder: not checkable
    other = _claim1_run(tmp_path / "other", {**recipe, "head": "bidirectional", "decay": 0.0}, {**recipe, "head": "causal"})
    with pytest.raises(JfbenchError, match="differ in decay"):
        check_twins([other])
    packed = _claim1_run(tmp_path / "packed", {**recipe, "head": "bidirectional", "layout": "packed"},
                         {**recipe, "head": "causal", "layout": "packed"})
    with pytest.raises(JfbenchError, match="not the bidirectional twin"):
        check_twins([packed])
    # a plateau stop that never fired trains as no plateau stop; one that fired is another recipe
    ran_out = _claim1_run(tmp_path / "ran-out", {**recipe, "head": "bidirectional", "stop_on_plateau": False},
                          {**recipe, "head": "causal", "stop_on_plateau": True})
    assert check_twins([ran_out]) == []
    stopped = _claim1_run(tmp_path / "stopped", {**recipe, "head": "bidirectional", "stop_on_plateau": True},
                          {**recipe, "head": "causal", "stop_on_plateau": False}, stop="plateau")
    with pytest.raises(JfbenchError, match="differ in stop_on_plateau"):
        check_twins([stopped])


def test_twin_check_reads_the_records_a_run_keeps_once_its_head_folders_are_gone(tmp_path):
    recipe = {"layout": "mask", "seed": 0}
    run = _claim1_run(tmp_path, {**recipe, "head": "bidirectional", "decay": 0.0}, {**recipe, "head": "causal", "decay": 7.0})
    (run / "heads").mkdir()
    for name in ("dflash", "jetflow"):  # what the sweep copies there (`RunStore.keep_head_records`)
        shutil.move(tmp_path / f"head-{name}" / "config.json", run / "heads" / f"{name}.config.json")
    with pytest.raises(JfbenchError, match="differ in decay"):  # still checked: the decay mismatch is found
        check_twins([run])
    shutil.rmtree(run / "heads")
    assert check_twins([run]) == [run]  # no record anywhere: said unchecked
