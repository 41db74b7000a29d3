"""The tidy tables of a run: raw rows per cell, and the summary derived from them.

Every number in `summary` comes from `jetflow_bench.measure.metrics.summarize` over the raw `steps` and
`requests` rows (plus the per-cell wall clock), so the summary can always be rebuilt, and checked,
from the raw rows. Column lists are in `jetflow_bench.sweep` (the run-folder layout).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict

import numpy as np
import pandas as pd

from jetflow_bench.core.arms import AR_ARM, ARM_KEYS
from jetflow_bench.core.budget_policy import AUTO_COLUMN
from jetflow_bench.core.calibration import calibration_by
from jetflow_bench.measure.metrics import (
    DRAFT_COST_COLUMNS,
    clear_of_noise,
    noise_floor,
    pooled_speedups,
    rate,
    summarize,
    tau,
)
from jetflow_bench.measure.serving import LATENCY_COLUMNS, request_latency
from jetflow_bench.report.loading import paired_only
from jetflow_bench.report.tree_shape import NODE_CAP
from jetflow_bench.sweep.engines import SIMULATED
from jetflow_bench.sweep.grid import CELL_KEYS, PAIR_KEYS, Cell
from jetflow_bench.sweep.lossless import Verdict
from jetflow_bench.sweep.records import PAIRED_COLUMNS, CellRun

STEP_COLUMNS = [
    "run_id", *CELL_KEYS, "request", "step", "batch_step", "active", "drafted", "accepted", "accepted_raw",
    "emitted", "depth", *DRAFT_COST_COLUMNS, "verify_flops", "draft_s", "verify_s", "other_s", "timing", "step_budget",
    "rank1_len", "rank1_gap",
]
REQUEST_COLUMNS = [
    "run_id", *CELL_KEYS, "request", "record_id", "prompt", "prompt_hash", "prompt_tokens",
    "output_ids", "output", "new_tokens", "finish_reason", "ttft_s", "decode_s", "steps", "drafted",
    "accepted", "accepted_raw", "emitted", "tau", "lossless", "excused", "first_divergence", "tie_gap", "correct", "config_hash",
    "session", "batch_started", *PAIRED_COLUMNS, *LATENCY_COLUMNS,
]
# Request columns newer than some recorded cells (their cells stay readable, with no speed-up):
# the session and start of each request's batch and the times paired with it in its round.
PAIRING_COLUMNS = ("session", "batch_started", *PAIRED_COLUMNS)
CELL_COLUMNS = [
    "run_id", *CELL_KEYS, "cell_id", "config_hash", "engine", "n_requests", "wall_s", "peak_mem_bytes",
    "drafted_mean", "drafted_max", "budget_fill", "started", "finished", "baseline", "session", "pairing",
    "base_wall_s",
]
CELL_EXTRAS = [
    "drafted_mean", "drafted_max", "budget_fill", "peak_mem_bytes", "engine", "baseline", "config_hash", "session", "pairing",
]
# One row per verified drafted node (root excluded) of drafters whose node scores are log-probs: the
# acceptance calibration's and the tree shape's raw data. At most NODE_CAP nodes per tree and step,
# the first in build order, so the table at a budget <= NODE_CAP holds every node the drafter would
# have built there.
NODE_COLUMNS = [*CELL_KEYS, "request", "step", "node", "parent", "score", "accepted"]
# One row per verify step of a drafter whose trees replay from pass-1 marginals (`Drafter.replay_tree`):
# its top-K children at depths 1..D, flattened depth-major (D x K), and the tree options as JSON.
MARGINAL_COLUMNS = [*CELL_KEYS, "request", "step", "k", "tokens", "logps", "entropy", "tree"]
# One row per verify step of a drafter that ranks the emitted tokens (`Drafter.emitted_ranks`: EAGLE):
# the rank of each committed token (accepted path, then the bonus) among its parent node's top-K.
RANK_COLUMNS = [*CELL_KEYS, "request", "step", "ranks"]


def prompt_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cell_frames(
    run_id: str,
    cell: Cell,
    config_hash: str,
    engine: str,
    run: CellRun,
    texts: dict[int, tuple[str, str, str]],
    verdicts: dict[int, Verdict],
    correct: dict[int, bool | None],
    baseline: str = AR_ARM,
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(steps rows, requests rows, the cell's row) of one finished cell.

    ``texts[request]`` = (record id, prompt text, decoded output text). ``baseline`` names the arm
    its speed-ups divide by: the plain decoding of the same engine (`summary_table`).
    """
    keys = cell.keys
    steps = pd.DataFrame(
        [{"run_id": run_id, **keys, "request": request, **_step_fields(record)} for request, record in run.steps],
        columns=STEP_COLUMNS,
    )
    per_request = steps.groupby("request")[["drafted", "accepted", "accepted_raw", "emitted"]].sum()
    rows = []
    for request, result in sorted(run.outputs.items()):
        record_id, prompt_text, output_text = texts[request]
        verdict = verdicts[request]
        counts = {c: int(per_request[c].get(request, 0)) for c in per_request.columns}
        rows.append({
            "run_id": run_id, **keys, "request": request, "record_id": record_id, "prompt": prompt_text,
            "prompt_hash": prompt_hash(prompt_text), "prompt_tokens": len(result.prompt_tokens),
            "output_ids": list(result.output_tokens), "output": output_text,
            "new_tokens": len(result.output_tokens), "finish_reason": result.finish_reason,
            "ttft_s": result.ttft_s, "decode_s": result.decode_s, "steps": result.steps, **counts,
            "tau": float(tau(counts["emitted"], result.steps)),
            "lossless": verdict.lossless, "excused": verdict.excused, "first_divergence": verdict.first_divergence,
            "tie_gap": verdict.tie_gap, "correct": correct[request], "config_hash": config_hash,
            **{c: run.paired.get(request, {}).get(c, np.nan) for c in PAIRING_COLUMNS},
            **_latency(run, request),
        })
    requests = pd.DataFrame(rows, columns=REQUEST_COLUMNS)
    requests["first_divergence"] = requests["first_divergence"].astype("Int64")
    requests["correct"] = requests["correct"].astype("boolean")
    requests["tie_gap"] = requests["tie_gap"].astype(float)
    slots = 0 if cell.budget.policy else cell.budget.nodes - 1  # auto: no single budget to fill
    drafted_mean = float(steps["drafted"].mean()) if len(steps) else np.nan
    row = {
        "run_id": run_id, **keys, "cell_id": cell.cell_id, "config_hash": config_hash, "engine": engine,
        "n_requests": len(requests), "n_steps": len(steps), "wall_s": run.wall_s, "peak_mem_bytes": run.peak_memory_bytes,
        "drafted_mean": drafted_mean, "drafted_max": int(steps["drafted"].max()) if len(steps) else 0,
        "budget_fill": float(rate(drafted_mean, slots)), "started": run.started, "finished": run.finished,
        "baseline": baseline, "base_wall_s": np.nan if run.base_wall_s is None else run.base_wall_s,
    }
    return steps, requests, row


def _latency(run: CellRun, request: int) -> dict:
    """A load cell's request: send time, TTFT, TPOT, E2EL and ITL gaps (`measure.serving`); its
    ``decode_s`` then runs from the first chunk to the last, as E2EL - TTFT."""
    timeline = run.timelines.get(request)
    if timeline is None:
        return {}
    latency = request_latency(timeline.sent_s, timeline.chunks)
    return {**latency, "decode_s": latency["e2el_s"] - latency["ttft_s"]}


def _step_fields(record) -> dict:
    """A step row's own fields; ``step_budget`` is the budget this step verified (the cell's budget,
    or the one `--budgets auto` chose)."""
    fields = asdict(record)
    own = {k: fields[k] for k in STEP_COLUMNS if k in fields and k not in ("budget", "request")}
    return {**own, "step_budget": fields["budget"]}


def node_frame(cell: Cell, run: CellRun) -> pd.DataFrame:
    """The cell's `NODE_COLUMNS` rows from the engine's node blocks (compact dtypes)."""
    request, step, node, parent, score, accepted = [], [], [], [], [], []
    for global_request, block in run.nodes:
        n = min(len(block.scores), NODE_CAP)
        on_path = np.zeros(len(block.scores), dtype=bool)
        on_path[block.path] = True
        request.append(np.full(n - 1, global_request))
        step.append(np.full(n - 1, block.step))
        node.append(np.arange(1, n))
        parent.append(np.asarray(block.parents[1:n]))
        score.append(np.asarray(block.scores[1:n]))
        accepted.append(on_path[1:n])
    if not request:
        return pd.DataFrame(columns=NODE_COLUMNS)
    frame = pd.DataFrame({
        "request": np.concatenate(request).astype(np.int32), "step": np.concatenate(step).astype(np.int32),
        "node": np.concatenate(node).astype(np.int16), "parent": np.concatenate(parent).astype(np.int16),
        "score": np.concatenate(score).astype(np.float32), "accepted": np.concatenate(accepted),
    })
    for key, value in reversed(cell.keys.items()):
        frame.insert(0, key, value)
    return frame[NODE_COLUMNS]


def marginal_frame(cell: Cell, run: CellRun) -> pd.DataFrame | None:
    """The cell's `MARGINAL_COLUMNS` rows (int32 / float32 lists: the log-probs exactly as the drafter
    built its tree from them); None when its drafter's trees do not replay."""
    if run.replay_tree is None or not run.marginals:
        return None
    tree = json.dumps(run.replay_tree, sort_keys=True)
    rows = [{**cell.keys, "request": request, "step": block.step, "k": len(block.tokens[0]),
             "tokens": np.asarray(block.tokens, dtype=np.int32).ravel(), "logps": np.asarray(block.logps, dtype=np.float32).ravel(),
             "entropy": np.asarray(block.entropy, dtype=np.float32), "tree": tree} for request, block in run.marginals]
    return pd.DataFrame(rows, columns=MARGINAL_COLUMNS)


def rank_frame(cell: Cell, run: CellRun) -> pd.DataFrame | None:
    """The cell's `RANK_COLUMNS` rows; None when its drafter does not rank what it emitted."""
    if not run.ranks:
        return None
    rows = [{**cell.keys, "request": request, "step": block.step, "ranks": np.asarray(block.ranks, dtype=np.int16)}
            for request, block in run.ranks]
    return pd.DataFrame(rows, columns=RANK_COLUMNS)


def optional_frames(cell: Cell, run: CellRun) -> dict[str, pd.DataFrame | None]:
    """A finished cell's optional parts (`RunStore.write_cell`'s keyword arguments), None where its drafter records none."""
    return {"nodes": node_frame(cell, run), "marginals": marginal_frame(cell, run), "ranks": rank_frame(cell, run)}


def concat(frames: Sequence[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    """Concatenate, skipping empty frames (a cell may have no step rows) but keeping the columns."""
    non_empty = [f for f in frames if len(f)]
    return pd.concat(non_empty, ignore_index=True) if non_empty else pd.DataFrame(columns=columns)


def summary_table(
    steps: pd.DataFrame, requests: pd.DataFrame, cells: pd.DataFrame, n_boot: int, seed: int,
    nodes: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per cell: `metrics.summarize` columns, then the cell's budget fill, memory, engine, hash,
    pairing, the arm's pooled speed-up and noise floor (`evidence`), the acceptance calibration
    (`ece`, `calibration_nodes`; NaN / 0 without node rows) and, for `--budgets auto` cells,
    `chosen_budgets` (share of step rows per chosen budget, "16:0.62,64:0.38").

    Speed-ups divide by the baseline timed beside each request in its round (the sweep records it):
    the AR arm, or for another engine's arms that engine's plain decoding (vLLM arms divide by
    ``vllm:none``, whose own speed-up is then vLLM's plain decoding over jfbench's AR). A cell
    without such timings (a τ-only run, or recorded before in-session pairing) has no speed-up, and
    its `speedup_note` says why (`report.loading.paired_only`). Cells of the ``sim`` engine have no
    throughput and no losslessness counts (`sweep.sim_engine`).
    """
    if requests.empty:
        return pd.DataFrame(columns=[*CELL_KEYS])
    simulated = cells["engine"] == SIMULATED  # their wall time is the simulation's; their outputs are the AR cell's
    summary = summarize(steps, requests, CELL_KEYS, PAIR_KEYS, cells=cells[[*CELL_KEYS, "wall_s"]].assign(
        wall_s=cells["wall_s"].mask(simulated)), n_boot=n_boot, seed=seed, interleaved=True)
    summary = summary.merge(cells[[*CELL_KEYS, *CELL_EXTRAS]], on=CELL_KEYS, how="left")
    summary.loc[summary["engine"] == SIMULATED, ["lossless_unexcused", "lossless_excused"]] = np.nan  # not checked
    summary = summary.merge(evidence(requests, cells, n_boot, seed), on=ARM_KEYS, how="left")
    if nodes is not None and len(nodes):
        summary = summary.merge(calibration_by(nodes, CELL_KEYS), on=CELL_KEYS, how="left")
    else:
        summary["ece"] = np.nan
    summary["calibration_nodes"] = summary.get("calibration_nodes", pd.Series(0, index=summary.index)).fillna(0).astype(int)
    return paired_only(summary.merge(chosen_budgets(steps), on=CELL_KEYS, how="left"))


def evidence(requests: pd.DataFrame, cells: pd.DataFrame, n_boot: int, seed: int) -> pd.DataFrame:
    """Per arm (repeats pooled): its decode speed-up with the hierarchical CI (`metrics.pooled_speedups`),
    the A/A noise floor at its batch size and load (`metrics.noise_floor`, from the rounds whose baseline is
    the AR arm) and whether the speed-up's CI is clear of it (`speedup_distinct`)."""
    base = cells[[*CELL_KEYS, "baseline"]] if "baseline" in cells else cells[CELL_KEYS].assign(baseline=AR_ARM)
    rows = requests.merge(base, on=CELL_KEYS, how="left")
    noise = noise_floor(rows[rows["baseline"].fillna(AR_ARM) == AR_ARM], ["batch_size", "load"], n_boot, seed)
    arms = pooled_speedups(requests, ARM_KEYS, n_boot, seed).merge(noise, on=["batch_size", "load"], how="left")
    arms["speedup_distinct"] = clear_of_noise(arms["speedup_arm_lo"], arms["speedup_arm_hi"],
                                              arms["noise_aa_lo"], arms["noise_aa_hi"])
    arms.loc[arms["drafter"] == AR_ARM, "speedup_distinct"] = pd.NA  # the baseline over itself: 1 by definition
    return arms


def chosen_budgets(steps: pd.DataFrame) -> pd.DataFrame:
    """Per `--budgets auto` cell, the share of its step rows at each chosen budget ('4:0.10,16:0.90')."""
    auto = steps[steps["budget"] == AUTO_COLUMN] if "step_budget" in steps else steps.iloc[:0]
    rows = []
    for key, group in auto.groupby(CELL_KEYS):
        shares = group["step_budget"].value_counts(normalize=True).sort_index()
        rows.append({**dict(zip(CELL_KEYS, key, strict=True)),
                     "chosen_budgets": ",".join(f"{int(b)}:{share:.2f}" for b, share in shares.items())})
    return pd.DataFrame(rows, columns=[*CELL_KEYS, "chosen_budgets"])
