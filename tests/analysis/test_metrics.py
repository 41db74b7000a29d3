"""Metrics from raw counters, checked against hand-computed values."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.measure.metrics import (
    acceptance_stats,
    clear_of_noise,
    noise_floor,
    paired_ratio_ci,
    quality_stats,
    speedup,
    summarize,
    time_stats,
)

KEYS = ["suite", "drafter", "batch_size"]


def make_steps(
    accepted: dict[int, list[int]], drafted: int, budget: int, kept: dict[int, int] | None = None, **cell
) -> pd.DataFrame:
    """Batch-size-1 step rows: request r's steps run back to back, each its own batch_step.

    ``accepted`` holds what verification accepted per step; ``kept[r]`` = tokens the stop rule
    kept of request r's FINAL step (its accepted path + bonus, cut to that many), as the engine
    records it: emitted = kept, accepted = min(raw, kept). Other steps emit accepted + 1.
    """
    kept = kept or {}
    rows = []
    for r, accs in accepted.items():
        for i, raw in enumerate(accs):
            emitted = kept[r] if r in kept and i == len(accs) - 1 else raw + 1
            rows.append({"request": r, "step": i, "accepted": min(raw, emitted), "accepted_raw": raw,
                         "emitted": emitted, "drafted": drafted, "budget": budget})
    frame = pd.DataFrame(rows).assign(**cell)
    return frame.assign(
        batch_step=range(len(frame)), active=1, depth=budget - 1, draft_s=0.01, verify_s=0.02, other_s=0.01,
        draft_passes=2, draft_entries=3 * budget, draft_flops=1e6, verify_flops=4e6,
    )


def make_requests(decode_s: list[float], ttft_s: list[float], **cell) -> pd.DataFrame:
    n = len(decode_s)
    return pd.DataFrame({
        "request": range(n), "prompt_tokens": 10, "new_tokens": 11, "ttft_s": ttft_s,
        "decode_s": decode_s, "steps": 4, "correct": [True, False, None][:n],
        "lossless": True, "excused": False,
    }).assign(**cell)


def test_tau_alpha_budget_efficiency_depths_and_histogram() -> None:
    steps = make_steps({0: [0, 2, 3]}, drafted=3, budget=4, suite="s", drafter="jetflow", batch_size=1)
    steps.loc[2, "drafted"] = 2  # a tree smaller than its budget: α and budget efficiency differ
    row = acceptance_stats(steps, KEYS).iloc[0]
    assert row["n_steps"] == 3 and row["accepted"] == 5 and row["drafted"] == 8
    assert row["tau"] == pytest.approx(1 + 5 / 3)
    assert row["alpha"] == pytest.approx(5 / 8)
    assert row["budget_efficiency"] == pytest.approx(5 / 9)
    assert [row["a_1"], row["a_2"], row["a_3"]] == pytest.approx([2 / 3, 2 / 3, 1 / 3])
    assert [row["p_1"], row["p_2"], row["p_3"]] == pytest.approx([2 / 3, 1.0, 1 / 2])
    assert json.loads(row["accept_hist"]) == [1, 0, 1, 1]


def test_tau_counts_only_tokens_kept_after_the_stop_rule() -> None:
    # Request 0: steps accept 3, 1, then 4 — but EOS sits at the 2nd token of the final step's path,
    # so that step keeps 2 tokens (2 accepted drafts, no bonus). Request 1: steps accept 0, 2; its
    # final step keeps both drafts and the bonus (3 tokens). Request 2: one step accepting 5 whose
    # max_new_tokens cut keeps 4 drafts, no bonus.
    steps = make_steps({0: [3, 1, 4], 1: [0, 2], 2: [5]}, drafted=6, budget=8, kept={0: 2, 1: 3, 2: 4},
                       suite="s", drafter="jetflow", batch_size=1)
    row = acceptance_stats(steps, KEYS).iloc[0]
    emitted = 4 + 2 + 2 + 1 + 3 + 4  # per step: accepted + 1, except the three cut final steps
    assert steps["emitted"].sum() == emitted == 16
    kept_accepted = 3 + 1 + 2 + 0 + 2 + 4
    assert row["n_steps"] == 6 and row["accepted"] == kept_accepted == 12 and row["accepted_raw"] == 15
    assert row["tau"] == pytest.approx(emitted / 6)  # NOT 1 + 15/6 (the raw count)
    assert row["accepted_per_step"] == pytest.approx(12 / 6)
    assert row["alpha"] == pytest.approx(12 / 36)
    # kept accepted per step: 3, 1, 2, 0, 2, 4 → at least d: d=1: 5, d=2: 4, d=3: 2, d=4: 1
    assert [row[f"a_{d}"] for d in range(1, 5)] == pytest.approx([5 / 6, 4 / 6, 2 / 6, 1 / 6])
    assert json.loads(row["accept_hist"]) == [1, 1, 2, 1, 1]
    assert [row["draft_passes"], row["draft_entries"], row["draft_flops"], row["verify_flops"]] == [2, 24, 1e6, 4e6]


def test_tau_per_draft_skips_steps_that_proposed_nothing() -> None:
    steps = make_steps({0: [2, 0, 0, 3]}, drafted=4, budget=5, suite="s", drafter="ngram", batch_size=1)
    steps.loc[[1, 2], "drafted"] = 0  # no prompt-lookup match in steps 1 and 2
    row = acceptance_stats(steps, KEYS).iloc[0]
    assert row["tau"] == pytest.approx((3 + 1 + 1 + 4) / 4)
    assert row["tau_per_draft"] == pytest.approx(1 + 5 / 2)  # vLLM's mean acceptance length


def test_draft_depth_averages_the_tree_depth_of_steps_that_drafted() -> None:
    steps = make_steps({0: [1, 0, 2, 0]}, drafted=3, budget=4, suite="s", drafter="ngram", batch_size=1)
    steps["depth"] = [1, 0, 3, 2]
    steps.loc[1, "drafted"] = 0  # no draft: its depth 0 must not pull the mean down
    assert acceptance_stats(steps, KEYS).iloc[0]["draft_depth"] == pytest.approx((1 + 3 + 2) / 3)
    ar = make_steps({0: [0, 0]}, drafted=0, budget=1, suite="s", drafter="ar", batch_size=1)
    assert math.isnan(acceptance_stats(ar, KEYS).iloc[0]["draft_depth"])
    assert math.isnan(acceptance_stats(steps.drop(columns="depth"), KEYS).iloc[0]["draft_depth"])  # rows without it


def test_old_step_rows_without_cost_counters_give_nan() -> None:
    steps = make_steps({0: [1]}, drafted=3, budget=4, suite="s", drafter="jetflow", batch_size=1)
    row = acceptance_stats(steps.drop(columns=["draft_passes", "verify_flops", "accepted_raw"]), KEYS).iloc[0]
    assert math.isnan(row["draft_passes"]) and math.isnan(row["verify_flops"]) and row["draft_flops"] == 1e6


def test_max_depth_pads_columns_and_empty_denominators_are_nan() -> None:
    steps = pd.concat([
        make_steps({0: [0, 2, 3]}, drafted=3, budget=4, suite="s", drafter="jetflow", batch_size=1),
        make_steps({0: [0, 0]}, drafted=0, budget=1, suite="s", drafter="ar", batch_size=1),
    ])
    stats = acceptance_stats(steps, KEYS, max_depth=5).set_index("drafter")
    assert [c for c in stats.columns if c[:2] in ("a_", "p_")] == [f"{x}_{d}" for x in "ap" for d in range(1, 6)]
    jet, ar = stats.loc["jetflow"], stats.loc["ar"]
    assert jet["a_4"] == 0 and jet["p_4"] == 0 and math.isnan(jet["p_5"])  # a_4 = 0 → p_5 = 0/0
    assert json.loads(jet["accept_hist"]) == [1, 0, 1, 1, 0, 0]
    assert ar["tau"] == 1.0 and ar["a_1"] == 0 and ar["p_1"] == 0
    assert math.isnan(ar["alpha"]) and math.isnan(ar["budget_efficiency"]) and math.isnan(ar["p_2"])
    assert json.loads(ar["accept_hist"]) == [2, 0, 0, 0, 0, 0]


def test_batched_step_times_are_counted_once_per_batch_step() -> None:
    # Two requests in one batch: batch_steps 0 and 1 hold both, batch_step 2 only request 1.
    steps = pd.DataFrame({
        "request": [0, 1, 0, 1, 1], "step": [0, 0, 1, 1, 2], "batch_step": [0, 0, 1, 1, 2],
        "active": [2, 2, 2, 2, 1], "drafted": 3, "accepted": 1, "emitted": 2, "depth": 3, "budget": 4,
        "draft_s": [0.1, 0.1, 0.1, 0.1, 0.05], "verify_s": [0.2, 0.2, 0.2, 0.2, 0.1],
        "other_s": [0.1, 0.1, 0.1, 0.1, 0.05],
    }).assign(suite="s", drafter="jetflow", batch_size=2)
    requests = pd.DataFrame({
        "request": [0, 1], "new_tokens": [5, 9], "ttft_s": [0.1, 0.1], "decode_s": [0.4, 0.8],
    }).assign(suite="s", drafter="jetflow", batch_size=2)
    row = time_stats(steps, requests, KEYS).iloc[0]
    assert [row["draft_s"], row["verify_s"], row["other_s"]] == pytest.approx([0.25, 0.5, 0.25])
    assert row["other_share"] == pytest.approx(0.25)
    assert row["seq_tokens_per_s"] == pytest.approx(14 / 1.4)
    assert row["tokens_per_s"] == row["seq_tokens_per_s"] and math.isnan(row["wall_s"])
    assert row["tpot_s"] == pytest.approx(1.2 / 12)
    assert row["ttft_s"] == pytest.approx(0.1)
    cells = pd.DataFrame({"suite": ["s"], "drafter": ["jetflow"], "batch_size": [2], "wall_s": [0.7]})
    walled = time_stats(steps, requests, KEYS, cells).iloc[0]
    assert walled["tokens_per_s"] == pytest.approx(20.0) and walled["seq_tokens_per_s"] == pytest.approx(10.0)
    steps.loc[1, "verify_s"] = 0.3
    with pytest.raises(ValueError, match="batch_step"):
        time_stats(steps, requests, KEYS)


def test_micro_and_macro_speedup_differ() -> None:
    baseline = make_requests([10.0, 10.0, 10.0], [1.0, 1.0, 1.0])
    method = make_requests([5.0, 10.0, 2.0], [1.0, 1.0, 1.0])
    decode = speedup(method, baseline, "decode", n_boot=500, seed=3)
    assert decode["micro"] == pytest.approx(30 / 17)
    assert decode["macro"] == pytest.approx((2 + 1 + 5) / 3)
    for stat in ("micro", "macro"):
        assert decode[f"{stat}_lo"] <= decode[stat] <= decode[f"{stat}_hi"]
        assert decode[f"{stat}_lo"] < decode[f"{stat}_hi"]
    e2e = speedup(method, baseline, "e2e", n_boot=500, seed=3)
    assert e2e["micro"] == pytest.approx(33 / 20)
    assert e2e["macro"] == pytest.approx((11 / 6 + 1 + 11 / 3) / 3)
    assert speedup(method, baseline, "decode", n_boot=500, seed=3) == decode  # seeded


def test_ci_is_degenerate_when_every_prompt_has_the_same_ratio() -> None:
    result = paired_ratio_ci(np.array([2.0, 6.0, 8.0]), np.array([1.0, 3.0, 4.0]), n_boot=200)
    assert result == dict.fromkeys(result, 2.0)


def test_speedup_edge_cases() -> None:
    assert all(math.isnan(v) for v in paired_ratio_ci(np.array([]), np.array([])).values())
    assert math.isnan(paired_ratio_ci(np.array([1.0]), np.array([0.0]))["macro"])
    with pytest.raises(JfbenchError, match="same prompts"):
        speedup(make_requests([1.0, 2.0], [0.1, 0.1]), make_requests([1.0, 2.0, 3.0], [0.1] * 3))


def test_the_speedup_ci_resamples_repeats_as_well_as_prompts() -> None:
    """The bug: the bootstrap resampled prompts only, so a baseline that ran 30% slower in one repeat
    than in another left the CI as narrow as if every repeat had seen the same machine."""
    rng = np.random.default_rng(0)
    base = rng.uniform(1.0, 2.0, size=(3, 40))  # (repeats, prompts)
    method = base / 1.5 * np.array([[1.0], [1.3], [0.8]])  # the method's time drifts per repeat
    pooled = paired_ratio_ci(base, method, n_boot=500, seed=1)
    flat = paired_ratio_ci(base.ravel(), method.ravel(), n_boot=500, seed=1)  # every pair as a prompt
    assert pooled["micro"] == pytest.approx(flat["micro"]) and pooled["macro"] == pytest.approx(flat["macro"])
    assert pooled["micro_hi"] - pooled["micro_lo"] > 2 * (flat["micro_hi"] - flat["micro_lo"])
    assert paired_ratio_ci(base[:1], method[:1], 300, 2) == paired_ratio_ci(base[0], method[0], 300, 2)  # 1 repeat
    holes = method.copy()
    holes[1, :5] = np.nan  # pairs a repeat lacks are left out, not counted as zero
    kept = ~np.isnan(holes)
    assert paired_ratio_ci(base, holes, 0)["micro"] == pytest.approx(base[kept].sum() / holes[kept].sum())


def test_the_noise_floor_counts_each_rounds_aa_pair_once_per_batch_size() -> None:
    def rows(drafter: str, batch_size: int, base: list[float], aa: list[float], session: str = "s1") -> pd.DataFrame:
        return pd.DataFrame({"suite": "g", "drafter": drafter, "temperature": 0.0, "batch_size": batch_size,
                             "repeat": 0, "request": range(len(base)), "session": session,
                             "base_decode_s": base, "aa_decode_s": aa})

    requests = pd.concat([
        rows("ar", 1, [1.0, 2.0], [2.0, 2.0]), rows("ngram", 1, [1.0, 2.0], [2.0, 2.0]),  # one round's pair, twice
        rows("ngram", 1, [3.0, 3.0], [1.0, 1.0], session="s2"),  # another session's rounds count
        rows("ar", 4, [1.0, 1.0], [np.nan, np.nan]),  # a τ-only run's rows have no A/A copy
    ])
    floor = noise_floor(requests, ["batch_size"], n_boot=200).set_index("batch_size")
    assert list(floor.index) == [1]
    assert floor.loc[1, "noise_aa"] == pytest.approx(9.0 / 6.0) and floor.loc[1, "noise_rounds"] == 4
    assert floor.loc[1, "noise_aa_lo"] <= floor.loc[1, "noise_aa"] <= floor.loc[1, "noise_aa_hi"]


def test_the_noise_floor_keeps_each_load_levels_aa_pair_apart() -> None:
    # Bug caught: the same request served at two load levels deduplicated into one pair, so one
    # level's A/A pair stood for every level's.
    requests = pd.DataFrame({"suite": "g", "drafter": "ar", "temperature": 0.0, "batch_size": 4, "repeat": 0,
                             "request": [0, 1, 0, 1], "session": "s1", "load": ["poisson:1"] * 2 + ["poisson:8"] * 2,
                             "base_decode_s": [1.0, 1.0, 2.0, 2.0], "aa_decode_s": [1.0, 1.0, 1.0, 1.0]})
    floor = noise_floor(requests, ["batch_size", "load"], n_boot=50).set_index("load")
    assert floor["noise_aa"].to_dict() == {"poisson:1": pytest.approx(1.0), "poisson:8": pytest.approx(2.0)}


def test_a_speedup_is_distinct_only_when_its_ci_clears_the_aa_band() -> None:
    lo, hi = pd.Series([1.05, 0.99, 0.80, np.nan]), pd.Series([1.10, 1.04, 0.90, 1.2])
    clear = clear_of_noise(lo, hi, pd.Series([0.97] * 4), pd.Series([1.03] * 4))
    assert clear.tolist() == [True, False, True, pd.NA]


def test_quality_counts_and_unscored_accuracy_is_nan() -> None:
    requests = make_requests([1.0, 1.0, 1.0], [0.1] * 3, suite="s", drafter="jetflow", batch_size=1)
    requests["lossless"] = [True, False, False]
    requests["excused"] = [False, True, False]
    row = quality_stats(requests, KEYS).iloc[0]
    assert row["accuracy"] == 0.5  # one of two scored; the NA request is not counted
    assert (row["n_requests"], row["lossless_unexcused"], row["lossless_excused"]) == (3, 1, 1)
    requests["correct"] = None
    assert math.isnan(quality_stats(requests, KEYS).iloc[0]["accuracy"])


def grid() -> tuple[pd.DataFrame, pd.DataFrame]:
    """AR and JetFlow arms on suite "s", plus a JetFlow cell on suite "t" that has no baseline."""
    ar, jet, other = ({"suite": "s", "drafter": "ar"}, {"suite": "s", "drafter": "jetflow"},
                      {"suite": "t", "drafter": "jetflow"})
    steps = pd.concat([
        make_steps({0: [0] * 4, 1: [0] * 4, 2: [0] * 4}, drafted=0, budget=1, batch_size=1, **ar),
        make_steps({0: [3, 1], 1: [0, 2, 4], 2: [1]}, drafted=6, budget=8, batch_size=1, **jet),
        make_steps({0: [2]}, drafted=6, budget=8, batch_size=1, **other),
    ], ignore_index=True)
    requests = pd.concat([
        make_requests([4.0, 4.0, 4.0], [0.5] * 3, batch_size=1, **ar),
        make_requests([1.0, 2.0, 1.0], [0.5] * 3, batch_size=1, **jet),
        make_requests([1.0], [0.5], batch_size=1, **other),
    ], ignore_index=True)
    return steps, requests


def test_summary_rows_are_rederivable_from_raw_rows() -> None:
    steps, requests = grid()
    summary = summarize(steps, requests, KEYS, pair_keys=["suite", "batch_size"], n_boot=300)
    speedups = [f"speedup_{k}_{s}{b}" for k in ("decode", "e2e") for s in ("micro", "macro")
                for b in ("", "_lo", "_hi")]
    depth = [f"{x}_{d}" for x in "ap" for d in range(1, 5)]
    assert list(summary.columns) == [
        *KEYS, "n_requests", "n_steps", "drafted", "accepted", "accepted_raw", "tau", "accepted_per_step",
        "tau_per_draft", "alpha", "budget_efficiency", "draft_passes", "draft_entries", "draft_flops",
        "verify_flops", *depth, "accept_hist", "rank1_faithful", "draft_depth", "new_tokens", "tokens_per_s", "seq_tokens_per_s", "wall_s", "tpot_s",
        "ttft_s", "draft_s", "verify_s", "other_s", "other_share", *speedups, "accuracy",
        "baseline_accuracy", "lossless_unexcused", "lossless_excused",
    ]
    rows = summary.set_index(["suite", "drafter"])
    jet, ar = rows.loc[("s", "jetflow")], rows.loc[("s", "ar")]
    jet_steps = steps[(steps["suite"] == "s") & (steps["drafter"] == "jetflow")]
    assert jet["tau"] == pytest.approx(jet_steps["emitted"].sum() / len(jet_steps)) == pytest.approx(1 + 11 / 6)
    assert jet["alpha"] == pytest.approx(11 / 36) and jet["budget_efficiency"] == pytest.approx(11 / 42)
    assert jet["a_3"] == pytest.approx(2 / 6) and jet["n_steps"] == 6
    assert jet["draft_s"] == pytest.approx(0.06) and jet["other_share"] == pytest.approx(0.25)
    assert ar["tau"] == 1.0 and ar["speedup_decode_micro"] == 1.0
    assert ar["speedup_e2e_macro_lo"] == ar["speedup_e2e_macro_hi"] == 1.0
    by_hand = speedup(requests[(requests["suite"] == "s") & (requests["drafter"] == "jetflow")],
                      requests[requests["drafter"] == "ar"], "e2e", n_boot=300)
    assert {k: jet[f"speedup_e2e_{k}"] for k in by_hand} == by_hand
    assert jet["speedup_decode_micro"] == pytest.approx(12 / 4) and jet["speedup_decode_macro"] == pytest.approx(10 / 3)
    assert jet["baseline_accuracy"] == ar["accuracy"] == 0.5
    assert math.isnan(rows.loc[("t", "jetflow"), "speedup_decode_micro"])
    assert math.isnan(rows.loc[("t", "jetflow"), "baseline_accuracy"])


def test_summary_refuses_ambiguous_baselines() -> None:
    steps, requests = grid()
    with pytest.raises(JfbenchError, match="pair_keys"):
        summarize(steps, requests.assign(batch_size=requests.index % 2), KEYS, pair_keys=["suite"])
    with pytest.raises(ValueError, match="subset"):
        summarize(steps, requests, KEYS, pair_keys=["repeat"])
