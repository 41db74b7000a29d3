"""Every benchmark rate, derived from the engine's raw counters (pure functions; docs/methodology.md).

The engine records counters, never rates; this module turns them into the summary table. Inputs
are two tidy frames (plus an optional third):

- steps — one row per (verify step, request): cell keys, `request`, `step`, `batch_step`,
  `active`, `drafted` (nodes, root excluded), `accepted` (kept after the stop rule),
  `accepted_raw` (before it), `emitted`, `depth`, `budget` (B, root included), the draft-cost
  counters `draft_passes`, `draft_entries`, `draft_flops`, `verify_flops`, and `draft_s` /
  `verify_s` / `other_s` (seconds of the whole *batched* step, repeated on every row of that
  `batch_step`).
- requests — one row per request: cell keys, `request`, `prompt_tokens`, `new_tokens`, `ttft_s`,
  `decode_s`, `steps`, `correct` (bool or NA = not scored), `lossless`, `excused`; from a sweep
  also `session` and the times taken beside it in its round (`PAIRED_TIMES`), which the in-session
  speed-ups and the A/A noise floor divide.
- cells (optional) — one row per cell: cell keys, `wall_s` (the cell's wall-clock span).

A cell is one combination of the `keys` columns. Every ratio whose denominator is empty is NaN,
never 0 or an error: "no data" must not read as "no acceptance".
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Literal

import numpy as np
import pandas as pd
from pandas.api.typing import DataFrameGroupBy

from jetflow_bench.core.arms import AR_ARM, ARM_KEYS
from jetflow_bench.core.errors import JfbenchError

STEP_TIME_COLUMNS = ("draft_s", "verify_s", "other_s")
DRAFT_COST_COLUMNS = ("draft_passes", "draft_entries", "draft_flops")  # the drafter's, per step row
COST_COLUMNS = (*DRAFT_COST_COLUMNS, "verify_flops")
SPEEDUP_FIELDS = ("micro", "micro_lo", "micro_hi", "macro", "macro_lo", "macro_hi")
BOOT_CHUNK = 100  # bootstrap resamples gathered at once
# Per request, the times paired with it in its round of the sweep (jetflow_bench.sweep.records):
# its baseline arm's (AR for the AR cell itself) and the AR baseline's second, A/A copy.
PAIRED_TIMES = {"base": ("base_decode_s", "base_ttft_s"), "aa": ("aa_decode_s", "aa_ttft_s")}
TimeKind = Literal["decode", "e2e"]
FAITHFUL_NATS = 5.0  # the paper's threshold: a rank-1 branch within 5 nats of the target's greedy choices


def rate(num: np.ndarray | pd.Series | float, den: np.ndarray | pd.Series | float) -> np.ndarray:
    """num / den elementwise, NaN where den == 0 (an empty denominator has no rate): every rate here
    and in the tables and scripts that report one is this division."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    out = np.full(np.broadcast(num, den).shape, np.nan)
    np.divide(num, den, out=out, where=den != 0)
    return out


def tau(emitted: np.ndarray | pd.Series | float, steps: np.ndarray | pd.Series | float) -> np.ndarray:
    """τ = Σemitted / Σverify steps, from those two sums: tokens per target forward, the bonus
    token included (so plain decoding has τ = 1); NaN without steps."""
    return rate(emitted, steps)


def _grouped(frame: pd.DataFrame, keys: list[str]) -> DataFrameGroupBy:
    # dropna=False: a NaN key (e.g. no budget for the AR arm) is still a cell.
    return frame.groupby(keys, dropna=False, sort=True)


def acceptance_stats(steps: pd.DataFrame, keys: list[str], max_depth: int | None = None) -> pd.DataFrame:
    """Acceptance counters, rates and draft cost per cell, one row per cell.

    `accepted` counts drafted tokens kept after the stop rule; `accepted_raw` those accepted by
    verification before it (they differ only on a request's final step). With N = number of step
    rows, N_d = rows that drafted at least one token, and sums over rows:
        tau               = Σemitted / N               (tokens per verify step, bonus included)
        accepted_per_step = Σaccepted / N              (bonus excluded; = tau − 1 except for the
                                                        final bonus tokens a stop rule cut)
        tau_per_draft     = 1 + Σaccepted / N_d        (vLLM's "mean acceptance length": steps that
                                                        proposed nothing do not count; NaN if N_d = 0)
        alpha             = Σaccepted / Σdrafted       (NaN when nothing was drafted, e.g. AR)
        budget_efficiency = Σaccepted / Σ(budget − 1)  (NaN when B = 1 throughout)
        a_d               = #{steps: accepted ≥ d} / N,        d = 1..D
        p_d               = a_d / a_{d−1},  a_0 = 1            (NaN when a_{d−1} = 0)
        accept_hist       = JSON list, element k = #{steps: accepted = k}
        rank1_faithful    = #{steps: rank1_len > 0, rank1_gap ≤ FAITHFUL_NATS} / #{steps: rank1_len > 0}
                            (jetflow_bench.engine.faithfulness; NaN without such steps or counters)
        draft_depth       = mean `depth` over the N_d rows that drafted (the tree's deepest node;
                            1 = first tokens only; NaN if N_d = 0 or for rows without the
                            counter): where the budget went
        draft_passes, draft_entries, draft_flops, verify_flops = their means per step row
                            (NaN for rows recorded before these counters existed)
    D = `max_depth` if given (so several runs share columns) else the largest `accepted` in
    `steps`; the histogram always runs to max(D, largest accepted) so it never drops a step.
    Columns: keys..., n_steps, drafted, accepted, accepted_raw, tau, accepted_per_step,
    tau_per_draft, alpha, budget_efficiency, draft_passes, draft_entries, draft_flops,
    verify_flops, a_1..a_D, p_1..p_D, accept_hist, rank1_faithful, draft_depth.
    """
    most = int(steps["accepted"].max()) if len(steps) else 0
    depth = most if max_depth is None else max_depth
    rows = steps.assign(
        slots=steps["budget"] - 1, drafting=steps["drafted"] > 0,
        **{c: steps.get(c, np.nan) for c in ("accepted_raw", "depth", *COST_COLUMNS)},
        ranked=steps.get("rank1_len", 0) > 0, faithful=(steps.get("rank1_len", 0) > 0)
        & (steps.get("rank1_gap", np.nan) <= FAITHFUL_NATS),
        drafted_depth=lambda r: r["depth"].where(r["drafting"]),  # NaN on steps that drafted nothing
    )
    sums = _grouped(rows, keys).agg(
        n_steps=("accepted", "size"), drafted=("drafted", "sum"), accepted=("accepted", "sum"),
        accepted_raw=("accepted_raw", "sum"), emitted=("emitted", "sum"), slots=("slots", "sum"),
        drafting=("drafting", "sum"), ranked=("ranked", "sum"), faithful=("faithful", "sum"),
        draft_depth=("drafted_depth", "mean"), **{c: (c, "mean") for c in COST_COLUMNS},
    )
    # counts[k] = steps accepting exactly k; at_least[d] = steps accepting ≥ d (reverse cumsum).
    counts = (
        _grouped(steps, [*keys, "accepted"]).size().unstack("accepted", fill_value=0)
        .reindex(columns=range(max(depth, most) + 1), fill_value=0)
        .reindex(sums.index)
    )
    at_least = counts.to_numpy()[:, ::-1].cumsum(axis=1)[:, ::-1]  # (cells, H+1); at_least[:, 0] = N
    out = sums[["n_steps", "drafted", "accepted", "accepted_raw"]].copy()
    out["tau"] = tau(sums["emitted"], sums["n_steps"])
    out["accepted_per_step"] = rate(sums["accepted"], sums["n_steps"])
    out["tau_per_draft"] = 1 + rate(sums["accepted"], sums["drafting"])
    out["alpha"] = rate(sums["accepted"], sums["drafted"])
    out["budget_efficiency"] = rate(sums["accepted"], sums["slots"])
    for c in COST_COLUMNS:
        out[c] = sums[c]
    for d in range(1, depth + 1):
        out[f"a_{d}"] = rate(at_least[:, d], at_least[:, 0])
    for d in range(1, depth + 1):
        out[f"p_{d}"] = rate(at_least[:, d], at_least[:, d - 1])
    out["accept_hist"] = [json.dumps(row) for row in counts.to_numpy().tolist()]
    out["rank1_faithful"] = rate(sums["faithful"], sums["ranked"])
    out["draft_depth"] = sums["draft_depth"]
    return out.reset_index()


def batch_step_times(steps: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per (cell, batch_step) with its draft/verify/other seconds.

    Timings belong to the batched forward, so they are repeated on every row that shares a
    `batch_step`; summing them over rows would count a batch of n sequences n times.
    Raises ValueError when rows of one batch_step disagree (an engine bug, not user input).
    """
    per_batch = _grouped(steps, [*keys, "batch_step"])[list(STEP_TIME_COLUMNS)]
    if (per_batch.nunique(dropna=False) > 1).any(axis=None):
        raise ValueError("rows of one batch_step carry different draft/verify/other seconds")
    return per_batch.first().reset_index()


def time_stats(
    steps: pd.DataFrame, requests: pd.DataFrame, keys: list[str], cells: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Time shares, throughput and latency per cell, one row per cell.

        draft_s, verify_s, other_s = Σ over unique batch_steps (see `batch_step_times`)
        other_share      = other_s / (draft_s + verify_s + other_s)
        seq_tokens_per_s = Σnew_tokens / Σ(ttft_s + decode_s)   (per-sequence rate: in a batched
                           cell requests overlap, so this is the rate one user sees)
        wall_s           = the cell's wall-clock span from `cells` (NaN without it)
        tokens_per_s     = Σnew_tokens / wall_s (aggregate throughput of the cell); falls back to
                           seq_tokens_per_s when wall_s is unknown, which is close to it at batch size 1
                           run back to back and understates it for batched cells
        tpot_s           = Σdecode_s / Σ(new_tokens − 1)   (the first token belongs to prefill)
        ttft_s           = mean ttft_s
    Columns: keys..., new_tokens, tokens_per_s, seq_tokens_per_s, wall_s, tpot_s, ttft_s,
    draft_s, verify_s, other_s, other_share.
    """
    step_times = _grouped(batch_step_times(steps, keys), keys)[list(STEP_TIME_COLUMNS)].sum(min_count=1)  # untimed: NaN
    per_request = requests.assign(
        latency_s=requests["ttft_s"] + requests["decode_s"], decoded=requests["new_tokens"] - 1
    )
    sums = _grouped(per_request, keys).agg(
        new_tokens=("new_tokens", "sum"), latency_s=("latency_s", "sum"), decode_s=("decode_s", "sum"),
        decoded=("decoded", "sum"), ttft_s=("ttft_s", "mean"),
    )
    out = sums.join(step_times, how="outer").reset_index()
    if cells is None:
        out["wall_s"] = np.nan
    else:
        if cells.duplicated(keys).any():
            raise ValueError("`cells` must hold one row per cell")
        out = out.merge(cells[[*keys, "wall_s"]], on=keys, how="left")
    out["seq_tokens_per_s"] = rate(out["new_tokens"], out["latency_s"])
    out["tokens_per_s"] = np.where(
        out["wall_s"].notna(), rate(out["new_tokens"], out["wall_s"]), out["seq_tokens_per_s"]
    )
    out["tpot_s"] = rate(out["decode_s"], out["decoded"])
    out["other_share"] = rate(out["other_s"], out[list(STEP_TIME_COLUMNS)].sum(axis=1, min_count=1))
    columns = ["tokens_per_s", "seq_tokens_per_s", "wall_s", "tpot_s", "ttft_s", *STEP_TIME_COLUMNS]
    return out[[*keys, "new_tokens", *columns, "other_share"]]


def _scores(correct: pd.Series) -> pd.Series:
    """True/False → 1.0/0.0 and NA (not scored) → NaN, so a mean is the accuracy of scored rows."""
    return correct.map({True: 1.0, False: 0.0}).astype(float)


def quality_stats(requests: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Accuracy and losslessness per cell, one row per cell.

        accuracy           = #correct / #scored  (scored = `correct` not NA; NaN if none scored)
        lossless_unexcused = #{requests: not lossless and not excused}
        lossless_excused   = #{requests: excused}  (divergence at an fp near-tie; docs/methodology.md)
    Columns: keys..., n_requests, accuracy, lossless_unexcused, lossless_excused.
    """
    flags = requests.assign(
        score=_scores(requests["correct"]),
        unexcused=~requests["lossless"].astype(bool) & ~requests["excused"].astype(bool),
        excused_=requests["excused"].astype(bool),
    )
    return _grouped(flags, keys).agg(
        n_requests=("request", "size"), accuracy=("score", "mean"),
        lossless_unexcused=("unexcused", "sum"), lossless_excused=("excused_", "sum"),
    ).reset_index()


def request_time(requests: pd.DataFrame, kind: TimeKind) -> pd.Series:
    """Per-request time indexed by `request`: decode → decode_s; e2e → ttft_s + decode_s."""
    if kind not in ("decode", "e2e"):
        raise ValueError(f"kind must be 'decode' or 'e2e', not {kind!r}")
    if requests["request"].duplicated().any():
        raise ValueError("speedup takes the requests of ONE cell; `request` ids repeat")
    time = requests["decode_s"] + (requests["ttft_s"] if kind == "e2e" else 0.0)
    return pd.Series(time.to_numpy(dtype=float), index=requests["request"].to_numpy())


def bootstrap_draws(n_prompts: int, n_seeds: int = 1, n_boot: int = 1000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Index draws of the two-level bootstrap over head seeds (or timing repeats) x prompts, both
    with replacement.

    Returns (seeds (n_boot, n_seeds), prompts (n_boot, n_prompts)): resample r pools the drawn
    seeds x the drawn prompts, one prompt draw for all of them, so prompt difficulty stays paired
    across seeds and across the arms a statistic compares. The prompt draws come first from
    ``np.random.default_rng(seed)``, so with one seed this is the plain prompt bootstrap, draw for draw.
    """
    rng = np.random.default_rng(seed)
    prompts = rng.integers(0, n_prompts, size=(n_boot, n_prompts))  # (n_boot, n)
    seeds = rng.integers(0, n_seeds, size=(n_boot, n_seeds))  # (n_boot, S)
    return seeds, prompts


def paired_ratio_ci(
    baseline_s: np.ndarray, method_s: np.ndarray, n_boot: int = 1000, seed: int = 0
) -> dict[str, float]:
    """Micro and macro speed-up of paired times, each with a percentile bootstrap 95% CI.

    The times are one row of prompts, or a (repeats × prompts) matrix; NaN marks a missing pair.
        micro = Σ baseline_s / Σ method_s        (time-weighted: long prompts count more)
        macro = mean over pairs of baseline_s / method_s  (every prompt and repeat counts once)
    The bootstrap is hierarchical: each of `n_boot` resamples draws repeats with replacement, then
    prompts with replacement (one prompt draw for all drawn repeats, `bootstrap_draws`), keeping
    each (baseline, method) pair together, so the interval covers both the prompts' spread and the
    repeats' (timing drift between them). With one repeat it is the plain prompt bootstrap. lo/hi
    are the 2.5th/97.5th percentiles of the resampled statistic. No pairs → all NaN; n_boot = 0 →
    NaN bounds.
    """
    base, method = np.atleast_2d(np.asarray(baseline_s, dtype=float)), np.atleast_2d(np.asarray(method_s, dtype=float))
    present = ~(np.isnan(base) | np.isnan(method))  # (R, n)
    if not present.any():
        return dict.fromkeys(SPEEDUP_FIELDS, float("nan"))
    base, method = np.where(present, base, 0.0), np.where(present, method, 0.0)
    ratios = np.where(present, rate(base, method), 0.0)  # (R, n)
    out = {"micro": float(rate(base.sum(), method.sum())), "macro": float(ratios.sum() / present.sum())}
    repeats, prompts = bootstrap_draws(base.shape[1], base.shape[0], n_boot, seed)  # (n_boot, R), (n_boot, n)
    boot: dict[str, list[np.ndarray]] = {"micro": [], "macro": []}
    for chunk in range(0, n_boot, BOOT_CHUNK):  # (chunk, R, n) gathers stay small for big grids
        rows, cols = repeats[chunk : chunk + BOOT_CHUNK, :, None], prompts[chunk : chunk + BOOT_CHUNK, None, :]
        boot["micro"].append(rate(base[rows, cols].sum(axis=(1, 2)), method[rows, cols].sum(axis=(1, 2))))
        boot["macro"].append(rate(ratios[rows, cols].sum(axis=(1, 2)), present[rows, cols].sum(axis=(1, 2))))
    for name, samples in boot.items():
        lo, hi = np.percentile(np.concatenate(samples), [2.5, 97.5]) if n_boot else (np.nan, np.nan)
        out[f"{name}_lo"], out[f"{name}_hi"] = float(lo), float(hi)
    return {name: out[name] for name in SPEEDUP_FIELDS}


def speedup(
    method_requests: pd.DataFrame,
    baseline_requests: pd.DataFrame,
    kind: TimeKind = "decode",
    n_boot: int = 1000,
    seed: int = 0,
) -> dict[str, float]:
    """Speed-up of one cell over its AR baseline on the same prompts, paired by `request`.

    kind = "decode" compares decode_s (first token → finish; the TPOT speed-up when both arms
    emit the same tokens), "e2e" compares ttft_s + decode_s. See `paired_ratio_ci` for the
    micro/macro formulas and the CI. Returns {micro, micro_lo, micro_hi, macro, macro_lo, macro_hi}.
    Raises JfbenchError when the two arms did not run the same prompts: an unpaired speed-up
    would compare different workloads.
    """
    method, baseline = request_time(method_requests, kind), request_time(baseline_requests, kind)
    unpaired = sorted(set(method.index) ^ set(baseline.index))
    if unpaired:
        raise JfbenchError(
            f"speed-up needs the same prompts in both arms; request ids {unpaired[:10]} are in only "
            "one of them: re-run the baseline (or the method) on the same prompts"
        )
    order = method.index.sort_values()
    return paired_ratio_ci(baseline.loc[order].to_numpy(), method.loc[order].to_numpy(), n_boot, seed)


def _times(requests: pd.DataFrame, kind: TimeKind, prefix: str = "") -> pd.Series:
    """Per row: the request's own time (``prefix`` "") or the time paired with it ("base", "aa")."""
    decode, ttft = PAIRED_TIMES[prefix] if prefix else ("decode_s", "ttft_s")
    return requests[decode] + (requests[ttft] if kind == "e2e" else 0.0)


def _paired(requests: pd.DataFrame) -> bool:
    """Whether every row carries the baseline timed in its round (cells recorded before in-session
    pairing, and τ-only runs, do not)."""
    columns = list(PAIRED_TIMES["base"])
    return set(columns) <= set(requests.columns) and bool(requests[columns].notna().all(axis=None))


def interleaved_speedups(requests: pd.DataFrame, keys: list[str], n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Speed-up of every cell over the baseline timed beside it: per request, its baseline arm's time
    in the same round of the same session (`PAIRED_TIMES`), never a cell timed in another session.

    decode pairs decode_s, e2e pairs ttft_s + decode_s (`paired_ratio_ci` for the formulas and the
    CI). A cell with a request that lacks its paired time gets NaN: it has no in-session baseline.
    Columns: keys..., speedup_{decode,e2e}_{micro,macro}{,_lo,_hi}.
    """
    rows = []
    for cell, group in _grouped(requests, keys):
        row = dict(zip(keys, cell, strict=True))
        for kind in ("decode", "e2e"):
            result = (paired_ratio_ci(_times(group, kind, "base").to_numpy(), _times(group, kind).to_numpy(), n_boot, seed)
                      if _paired(group) else dict.fromkeys(SPEEDUP_FIELDS, np.nan))
            row.update({f"speedup_{kind}_{field}": value for field, value in result.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def pooled_speedups(requests: pd.DataFrame, keys: list[str] = ARM_KEYS, n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Decode speed-up of every arm (``keys``: a cell's keys less `repeat`), its repeats pooled.

        speedup_arm = Σ base decode_s / Σ decode_s over every (repeat, request) pair of the arm,
                      each pair timed in one round (`interleaved_speedups`)
        speedup_arm_lo, _hi = the hierarchical bootstrap 95% CI over repeats and prompts
                      (`paired_ratio_ci` on the repeats × prompts matrix)
        speedup_repeats, speedup_sessions = the repeats and the sweep sessions the pairs come from
    NaN when a request of the arm lacks its paired time. Columns: keys..., those five.
    """
    rows = []
    for arm, group in _grouped(requests, keys):
        row = dict(zip(keys, arm, strict=True))
        ci = dict.fromkeys(SPEEDUP_FIELDS, np.nan)
        if _paired(group):
            frame = group.assign(base=_times(group, "decode", "base"), own=_times(group, "decode"))
            base, own = (frame.pivot(index="repeat", columns="request", values=v).to_numpy() for v in ("base", "own"))
            ci = paired_ratio_ci(base, own, n_boot, seed)
        sessions = group["session"].nunique() if "session" in group else 0
        row.update({"speedup_arm": ci["micro"], "speedup_arm_lo": ci["micro_lo"], "speedup_arm_hi": ci["micro_hi"],
                    "speedup_repeats": group["repeat"].nunique(), "speedup_sessions": sessions})
        rows.append(row)
    return pd.DataFrame(rows, columns=[*keys, "speedup_arm", "speedup_arm_lo", "speedup_arm_hi", "speedup_repeats",
                                       "speedup_sessions"])


NOISE_COLUMNS = ["noise_aa", "noise_aa_lo", "noise_aa_hi", "noise_rounds"]


def noise_floor(requests: pd.DataFrame, by: list[str], n_boot: int = 1000, seed: int = 0) -> pd.DataFrame:
    """The A/A noise floor per ``by`` group (e.g. batch size): the AR baseline timed against itself.

    Every round of a timed sweep decodes the AR baseline twice (its time, `base_*`, and a second
    copy, `aa_*`; a serving-load repeat serves it twice, `load.paired_with`); rows of one round carry
    the same pair, so each (session, suite, temperature, batch size, repeat, request, load) counts once. noise_aa = Σ base decode_s / Σ aa decode_s, with the
    hierarchical bootstrap CI over (session, repeat) and prompts (`paired_ratio_ci`); a perfectly
    quiet machine gives 1.00 [1.00, 1.00]. noise_rounds = the pairs it rests on. Rows without the
    A/A copy (τ-only runs, cells recorded before it) are left out. Columns: by..., `NOISE_COLUMNS`.
    """
    columns = ["session", "suite", "temperature", "batch_size", "repeat", "request", *(["load"] if "load" in requests else [])]
    base_s, aa_s = PAIRED_TIMES["base"][0], PAIRED_TIMES["aa"][0]
    if not {base_s, aa_s, "session"} <= set(requests.columns):
        return pd.DataFrame(columns=[*by, *NOISE_COLUMNS])
    pairs = requests.dropna(subset=[base_s, aa_s]).drop_duplicates(columns)
    rows = []
    for key, group in _grouped(pairs, by):
        cluster = group["session"].astype(str) + "/" + group["repeat"].astype(str)
        prompt = group["suite"].astype(str) + "/" + group["temperature"].astype(str) + "/" + group["request"].astype(str)
        frame = group.assign(cluster=cluster, prompt=prompt)
        base, aa = (frame.pivot(index="cluster", columns="prompt", values=v).to_numpy() for v in (base_s, aa_s))
        ci = paired_ratio_ci(base, aa, n_boot, seed)
        rows.append({**dict(zip(by, key if isinstance(key, tuple) else (key,), strict=True)), "noise_aa": ci["micro"],
                     "noise_aa_lo": ci["micro_lo"], "noise_aa_hi": ci["micro_hi"], "noise_rounds": len(group)})
    return pd.DataFrame(rows, columns=[*by, *NOISE_COLUMNS])


def clear_of_noise(lo: pd.Series, hi: pd.Series, noise_lo: pd.Series, noise_hi: pd.Series) -> pd.Series:
    """Whether a speed-up's CI [lo, hi] lies clear of the A/A band [noise_lo, noise_hi]: False when
    they overlap (the speed-up cannot be told from 1 on this machine), NA when either is unknown."""
    known = lo.notna() & hi.notna() & noise_lo.notna() & noise_hi.notna()
    clear = pd.Series(pd.NA, index=lo.index, dtype="boolean")
    clear[known] = (lo[known] > noise_hi[known]) | (hi[known] < noise_lo[known])
    return clear


def is_ar(requests: pd.DataFrame) -> pd.Series:
    """Default baseline predicate: rows of the plain autoregressive arm (drafter == AR_ARM)."""
    return requests["drafter"] == AR_ARM


def baseline_stats(
    requests: pd.DataFrame,
    keys: list[str],
    pair_keys: list[str],
    is_baseline: Callable[[pd.DataFrame], pd.Series] = is_ar,
    n_boot: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """Speed-ups and baseline accuracy of every cell against its baseline cell.

    A cell's baseline is the one cell whose rows satisfy `is_baseline` and whose `pair_keys`
    values (a subset of `keys`, e.g. suite, batch_size, repeat) equal the cell's. A cell with no
    baseline gets NaN; the baseline cell itself gets exactly 1. Raises JfbenchError when several
    baseline cells share pair_keys (add the key that tells them apart to pair_keys).
    Columns: keys..., speedup_{decode,e2e}_{micro,macro}{,_lo,_hi}, baseline_accuracy.
    """
    if not set(pair_keys) <= set(keys):
        raise ValueError(f"pair_keys {pair_keys} must be a subset of keys {keys}")
    mask = is_baseline(requests).to_numpy(dtype=bool)
    base_cells = requests.loc[mask, keys].drop_duplicates()
    clashes = base_cells[base_cells.duplicated(pair_keys, keep=False)]
    if len(clashes):
        raise JfbenchError(
            f"several baseline cells share pair_keys {pair_keys}: {clashes.to_dict('records')[:4]}; "
            "add the key that tells them apart to pair_keys"
        )
    baselines = dict(iter(_grouped(requests[mask], pair_keys)))
    rows = []
    for cell, method in _grouped(requests, keys):
        row = dict(zip(keys, cell, strict=True))
        baseline = baselines.get(tuple(method[pair_keys].iloc[0]))
        for kind in ("decode", "e2e"):
            result = (
                dict.fromkeys(SPEEDUP_FIELDS, np.nan) if baseline is None
                else speedup(method, baseline, kind, n_boot, seed)
            )
            row.update({f"speedup_{kind}_{field}": value for field, value in result.items()})
        row["baseline_accuracy"] = np.nan if baseline is None else _scores(baseline["correct"]).mean()
        rows.append(row)
    return pd.DataFrame(rows)


def summarize(
    steps: pd.DataFrame,
    requests: pd.DataFrame,
    keys: list[str],
    pair_keys: list[str],
    is_baseline: Callable[[pd.DataFrame], pd.Series] = is_ar,
    cells: pd.DataFrame | None = None,
    max_depth: int | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    interleaved: bool = False,
) -> pd.DataFrame:
    """The summary table: one row per cell, every column derived from the raw rows.

    Joins `acceptance_stats`, `time_stats`, `baseline_stats` and `quality_stats` (see each for
    its formulas) on `keys`. ``interleaved``: the speed-ups divide by the baseline timed beside
    each request in its round (`interleaved_speedups`, what a sweep records) instead of by the
    baseline cell that shares `pair_keys`. Column order: keys..., n_requests, n_steps, drafted, accepted,
    accepted_raw, tau, accepted_per_step, tau_per_draft, alpha, budget_efficiency, draft_passes,
    draft_entries, draft_flops, verify_flops, a_1..a_D, p_1..p_D, accept_hist, rank1_faithful, draft_depth,
    new_tokens, tokens_per_s,
    seq_tokens_per_s, wall_s, tpot_s, ttft_s, draft_s, verify_s, other_s, other_share,
    speedup_decode_micro(_lo, _hi), speedup_decode_macro(_lo, _hi), speedup_e2e_micro(_lo, _hi),
    speedup_e2e_macro(_lo, _hi), accuracy, baseline_accuracy, lossless_unexcused, lossless_excused.
    """
    quality = quality_stats(requests, keys)
    parts = [
        quality[[*keys, "n_requests"]],
        acceptance_stats(steps, keys, max_depth),
        time_stats(steps, requests, keys, cells),
        baseline_stats(requests, keys, pair_keys, is_baseline, 0 if interleaved else n_boot, seed),
        quality.drop(columns="n_requests"),
    ]
    if interleaved:
        parts[3] = parts[3][[*keys, "baseline_accuracy"]].merge(interleaved_speedups(requests, keys, n_boot, seed), on=keys)
    out = parts[0]
    for part in parts[1:]:
        out = out.merge(part, on=keys, how="outer")
    columns = [c for c in out.columns if c != "baseline_accuracy"]
    columns.insert(columns.index("accuracy") + 1, "baseline_accuracy")
    return out[columns].sort_values(keys, ignore_index=True)
