"""Synthetic run folders for the report and check tests, shaped like `jfbench sweep` output.

`write_fixture_run` simulates the engine's raw counters (one row per verify step and request, with
CPU-like timings: verification cost grows linearly with the budget) and derives the summary with
the real `metrics.summarize`, so report and check code sees the same columns a sweep writes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from jetflow_bench.measure.metrics import summarize
from jetflow_bench.sweep.tables import evidence

CELL_KEYS = ["suite", "drafter", "variant", "budget", "batch_size", "repeat"]
PAIR_KEYS = ["suite", "batch_size", "repeat"]
ALL_DRAFTERS = ("jetflow", "dflash", "eagle", "ngram")
# Per-drafter chance that the next drafted token is accepted at budget 16 (grows with the budget).
ACCEPT_P = {"jetflow": 0.78, "dflash": 0.74, "eagle": 0.72, "ngram": 0.45, "oracle": 0.99}
DRAFT_S = {"jetflow": 0.002, "dflash": 0.0015, "eagle": 0.006, "ngram": 0.0002, "oracle": 0.0001}
VARIANT_P = {"default": 0.0, "head=bidirectional": -0.12, "refine_passes=0": -0.05}
N_REQUESTS = 6
MAX_DEPTH = 12


def _cell_rows(
    rng: np.random.Generator, cell: dict, tokens: Sequence[int]
) -> tuple[list[dict], list[dict], float]:
    """Step rows, request rows and wall seconds of one cell: requests run in batches of `batch_size`."""
    budget, drafter, bs = cell["budget"], cell["drafter"], cell["batch_size"]
    p = 0.0 if drafter == "ar" else ACCEPT_P[drafter] + 0.04 * np.log2(budget / 16) + VARIANT_P[cell["variant"]]
    steps, requests, batch_step, wall_s = [], [], 0, 0.0
    for first in range(0, len(tokens), bs):
        left = {r: tokens[r] - 1 for r in range(first, min(first + bs, len(tokens)))}  # 1st token: prefill
        decode = dict.fromkeys(left, 0.0)
        step_no = dict.fromkeys(left, 0)
        wall_s += 0.01 + 0.001 * max(left)  # the batch's prefill
        while left:
            active = len(left)
            times = {"draft_s": 0.0 if drafter == "ar" else DRAFT_S[drafter] * (1 + budget / 128),
                     "verify_s": 0.0035 + 0.00022 * budget * active, "other_s": 0.0005 * active}
            for r in list(left):
                depth = min(budget - 1, MAX_DEPTH)
                accepted = int(min(rng.geometric(1 - p) - 1, depth)) if p else 0
                emitted = min(accepted + 1, left[r])
                steps.append({**cell, "request": r, "step": step_no[r], "batch_step": batch_step,
                              "active": active, "drafted": budget - 1,
                              "accepted": min(accepted, emitted), "accepted_raw": accepted, "emitted": emitted, "depth": depth, **times,
                              # a branch as deep as the tree, 2 nats short per rejected depth (no RNG draw)
                              "rank1_len": depth if p else 0, "rank1_gap": 2.0 * (depth - accepted) if p else 0.0})
                left[r] -= emitted
                step_no[r] += 1
                decode[r] += sum(times.values())
                if left[r] <= 0:
                    del left[r]
            batch_step += 1
            wall_s += sum(times.values())
        for r in decode:
            requests.append({**cell, "request": r, "prompt": f"prompt {r}", "output": f"answer {r}",
                             "prompt_tokens": 20 + r, "new_tokens": tokens[r], "ttft_s": 0.01 + 0.001 * r,
                             "decode_s": decode[r], "steps": step_no[r], "correct": bool(r % 3),
                             "lossless": True, "excused": False, "first_divergence": None})
    return steps, requests, wall_s


def _paired(requests: pd.DataFrame) -> pd.DataFrame:
    """The requests with the times a sweep pairs with each: the AR request's, and an A/A copy of it."""
    keys = ["suite", "batch_size", "repeat", "request"]
    base = requests.loc[requests["drafter"] == "ar", [*keys, "decode_s", "ttft_s"]].rename(
        columns={"decode_s": "base_decode_s", "ttft_s": "base_ttft_s"})
    out = requests.merge(base, on=keys, how="left")
    wobble = 1.0 + 0.01 * (out["request"] % 3 - 1)  # within 1%: a quiet machine
    return out.assign(aa_decode_s=out["base_decode_s"] * wobble, aa_ttft_s=out["base_ttft_s"], session="s1")


def _ablation(summary: pd.DataFrame) -> pd.DataFrame:
    """Variant minus default per drafter × suite × budget × batch size (the sweep's ablation table
    columns), repeats averaged, with a made-up CI of ± 0.1."""
    keys = ["drafter", "variant", "suite", "budget", "batch_size"]
    means = summary[summary["drafter"] != "ar"].groupby(keys, as_index=False)[["tau", "speedup_decode_micro"]].mean()
    default = means[means["variant"] == "default"].drop(columns="variant").rename(
        columns={"tau": "tau_default", "speedup_decode_micro": "speedup_default"})
    rows = means[means["variant"] != "default"].merge(default, on=["drafter", "suite", "budget", "batch_size"])
    rows["n_prompts"], rows["repeats"] = N_REQUESTS, summary["repeat"].nunique()
    rows["tau_delta"] = rows["tau"] - rows["tau_default"]
    rows["speedup_delta"] = rows["speedup_decode_micro"] - rows["speedup_default"]
    for col in ("tau_delta", "speedup_delta"):
        rows[f"{col}_lo"], rows[f"{col}_hi"] = rows[col] - 0.1, rows[col] + 0.1
    return rows


def write_fixture_run(
    path: Path,
    drafters: Sequence[str] = ALL_DRAFTERS,
    suites: Sequence[str] = ("gsm8k", "mt_bench"),
    budgets: Sequence[int] = (16, 64, 256),
    batch_sizes: Sequence[int] = (1, 4),
    repeats: int = 1,
    variants: Sequence[str] = ("default",),
    seed: int = 0,
    interleaved: bool = True,
) -> Path:
    """Write a run folder at `path` (summary, steps, requests, manifest; ablation when `variants`
    holds more than "default") and return `path`. Same arguments → identical folder.

    ``interleaved``: every request carries its AR baseline's time and an A/A copy within 1% of it,
    as a sweep that times them in rounds records them (the synthetic clock has no drift, so the AR
    cell's own times are that baseline); False writes a run recorded before in-session pairing."""
    rng = np.random.default_rng(seed)
    tokens = [30 + 7 * r for r in range(N_REQUESTS)]
    cells = [
        {"suite": s, "drafter": "ar", "variant": "default", "budget": 1, "batch_size": b, "repeat": k}
        for s in suites for b in batch_sizes for k in range(repeats)
    ] + [
        {"suite": s, "drafter": d, "variant": v, "budget": B, "batch_size": b, "repeat": k}
        for s in suites for d in drafters for v in variants for B in budgets for b in batch_sizes
        for k in range(repeats) if v == "default" or d == "jetflow"
    ]
    steps, requests = [], []
    for cell in cells:
        cell_steps, cell_requests, cell["wall_s"] = _cell_rows(rng, cell, tokens)
        steps += cell_steps
        requests += cell_requests
    steps_df, requests_df = pd.DataFrame(steps), pd.DataFrame(requests)
    requests_df = requests_df.astype({"first_divergence": "Int64", "correct": "boolean"})
    if interleaved:
        requests_df = _paired(requests_df)
    summary = summarize(steps_df, requests_df, CELL_KEYS, PAIR_KEYS, cells=pd.DataFrame(cells),
                        max_depth=MAX_DEPTH, n_boot=200, interleaved=interleaved)
    if interleaved:
        added = {"temperature": 0.0, "load": ""}  # cell keys this fixture's runs predate
        summary = summary.assign(**added, pairing="interleaved", session="s1").merge(
            evidence(requests_df.assign(**added), pd.DataFrame(cells).assign(**added), 200, 0),
            on=[*CELL_KEYS[:-1], *added], how="left")
    summary["budget_fill"] = 1.0
    summary["peak_mem_bytes"] = 50_000_000 + 10_000 * summary["budget"]
    summary["engine"] = "hf"
    summary["config_hash"] = f"c0ffee{seed:06d}"
    path.mkdir(parents=True, exist_ok=True)
    summary.to_parquet(path / "summary.parquet", index=False)
    summary.to_csv(path / "summary.csv", index=False)
    steps_df.to_parquet(path / "steps.parquet", index=False)
    requests_df.to_parquet(path / "requests.parquet", index=False)
    if len(variants) > 1:
        ablation = _ablation(summary)
        ablation.to_parquet(path / "ablation.parquet", index=False)
        ablation.to_csv(path / "ablation.csv", index=False)
    manifest = {
        "run_id": f"2026-11-30-c0ffee{seed:02d}-abc123", "kind": "sweep",
        "command": "jfbench sweep --budgets " + ",".join(map(str, budgets)),
        "config": {"target": "toy-4m", "budgets": list(budgets), "seed": seed},
        "config_hash": f"c0ffee{seed:06d}",
        "versions": {"python": "3.11.7", "torch": "2.14.0", "transformers": "5.24.0"},
        "device": "cpu (cpu, 2 threads)", "git_commit": "3706f37", "git_dirty": False,
        "seeds": {"seed": seed, "sample_seed": 0},
        "started": "2026-11-30T10:00:00+00:00", "finished": "2026-11-30T10:05:00+00:00",
    }
    (path / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return path

