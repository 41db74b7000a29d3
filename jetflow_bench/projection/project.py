"""Project a measured sweep onto another device: τ and draft counters in, step times and speed-ups out.

Per drafter × budget cell of the run (repeats averaged) and per projected batch size b:
τ, the draft counters (mean `draft_passes` P and `draft_entries` E per sequence-step) and the mean
tree size actually verified (1 + drafted / steps: an n-gram drafter often fills less than its
budget) are the run's; everything timed comes from `CostModel`. Padding a batch to its longest tree
is not modelled. Under greedy decoding τ does not depend on the batch
size, so a cell measured at one batch size is projected to every requested b; a run measured at
several batch sizes uses, for each b, the cell at the nearest measured batch size.

Columns of the result (one row per suite × drafter × variant × budget × batch_size):
    measured_batch_size, tau, tree_nodes, draft_passes, draft_entries, counters ("recorded" | "nominal"),
    draft_priced ("cost model" | "host (measured)": a drafter without head forwards keeps the run's
    measured draft seconds per sequence-step, its host work, times b),
    head_layers, head_taps, ar_s, draft_s, verify_s, bookkeeping_s, step_s, verify_bound,
    ar_tokens_per_s = b / ar_s, tokens_per_s = b · τ / step_s, speedup = τ · ar_s / step_s,
    eta = speedup / τ, measured_speedup (the run's own decode speed-up on its device), best (the
    budget with the largest speed-up for this suite × drafter × variant × batch size), hardware, target.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from jetflow_bench.core.arms import AR_ARM
from jetflow_bench.core.budget_policy import AUTO_COLUMN
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.projection.cost import CostModel
from jetflow_bench.projection.nominal import nominal_counters
from jetflow_bench.projection.shapes import ModelShape, head_shape
from jetflow_bench.report.loading import CELL_KEYS, SPEEDUP, Run, head_record

COUNTERS = ("draft_passes", "draft_entries")
GROUP = ["suite", "drafter", "variant", "temperature", "budget", "batch_size"]  # a cell per temperature: τ differs


@dataclass(frozen=True)
class HeadInfo:
    layers: int
    taps: int
    block_size: int | None


def head_info(spec: dict[str, Any], run: Run, layers: int | None, taps: int | None) -> HeadInfo | None:
    record = head_record(run.path, spec)
    if record is None and layers is None:
        return None
    record = record or {}
    recorded_taps = len((record.get("dflash_config") or {}).get("target_layer_ids") or []) or None
    return HeadInfo(
        layers=layers if layers is not None else int(record["num_hidden_layers"]),
        taps=taps if taps is not None else (recorded_taps or 1),
        block_size=int(record["block_size"]) if record.get("block_size") else None,
    )


def _specs(run: Run) -> dict[tuple[str, str], dict[str, Any]]:
    drafters = (run.manifest.get("config") or {}).get("drafters") or []
    return {(d["name"], d.get("variant", "default")): d for d in drafters}


def _cells(run: Run) -> pd.DataFrame:
    """Drafter cells with τ, the draft counters (NaN when not recorded) and the mean tree size
    `tree_nodes` = 1 + drafted / steps (the budget when the run does not say), repeats averaged.
    `--budgets auto` cells have no single budget to price: `--policy auto` replays them instead."""
    summary = run.summary[(run.summary["drafter"] != AR_ARM) & (run.summary["budget"] != AUTO_COLUMN)].copy()
    summary["host_draft_s"] = np.nan
    if "draft_s" in summary and ("n_steps" in summary or (run.path / "steps.parquet").is_file()):
        steps = summary.set_index(list(CELL_KEYS)).index.map(run.batch_steps.to_dict()).to_numpy(dtype=float)
        summary["host_draft_s"] = summary["draft_s"] / steps
    present = [c for c in COUNTERS if c in summary.columns]
    if {"drafted", "n_steps"} <= set(summary.columns):
        summary["tree_nodes"] = 1 + summary["drafted"] / summary["n_steps"].where(summary["n_steps"] > 0)
    else:
        summary["tree_nodes"] = summary["budget"]
    columns = ["tau", "tree_nodes", "host_draft_s", *present, SPEEDUP]
    cells = summary.groupby(GROUP, dropna=False)[columns].mean().reset_index()
    for column in COUNTERS:
        if column not in cells:
            cells[column] = np.nan
    cells["tree_nodes"] = cells["tree_nodes"].fillna(cells["budget"]).clip(upper=cells["budget"])
    return cells


def project_run(
    run: Run, model: CostModel, batch_sizes: list[int], head_layers: int | None = None,
    head_taps: int | None = None, require_counters: bool = False, hardware: str = "",
) -> tuple[pd.DataFrame, list[str]]:
    """The projection table (module docstring) and the notes to print (which cells used nominal counters)."""
    cells = _cells(run)
    if cells.empty:
        raise JfbenchError(f"run {str(run.path)!r} has no drafter cells to project (only the AR baseline)")
    specs, nominal, rows = _specs(run), [], []
    for (_suite, drafter, variant, _temperature, budget), group in cells.groupby(GROUP[:-1], dropna=False):
        spec = specs.get((drafter, variant), {"name": drafter, "variant": variant})
        head = head_info(spec, run, head_layers, head_taps)
        for b in batch_sizes:
            cell = group.iloc[int(np.argmin(np.abs(group["batch_size"].to_numpy() - b)))]
            passes, entries, source = _counters(cell, spec, head, run, require_counters)
            if source == "nominal" and b == batch_sizes[0]:
                nominal.append(f"{drafter}@{budget} (P={passes:g}, E={entries:g})")
            if passes > 0 and head is None:
                raise JfbenchError(
                    f"drafter {drafter!r} of run {str(run.path)!r} runs a head but its config.json is not found "
                    "(checkpoint moved?): pass --head-layers N (and --head-taps K)"
                )
            rows.append(_row(model, cell, int(b), float(passes), float(entries), source, head, hardware))
    table = pd.DataFrame(rows)
    notes = [f"run {str(run.path)!r} has no draft counters; nominal ones of each drafter kind used for "
             f"{', '.join(nominal)}"] if nominal else []
    keys = ["suite", "drafter", "variant", "temperature", "batch_size"]
    best = table.groupby(keys, dropna=False)["speedup"].transform("max")
    table["best"] = table["speedup"] == best
    return table.sort_values([*keys, "budget"], ignore_index=True), notes


def _counters(cell: pd.Series, spec: dict[str, Any], head: HeadInfo | None, run: Run,
              require: bool) -> tuple[float, float, str]:
    if not (pd.isna(cell["draft_passes"]) or pd.isna(cell["draft_entries"])):
        return float(cell["draft_passes"]), float(cell["draft_entries"]), "recorded"
    name = cell["drafter"]
    fix = "re-run the sweep with this jfbench (it records draft_passes / draft_entries per step)"
    if require:
        raise JfbenchError(f"run {str(run.path)!r} has no draft counters for drafter {name!r}: {fix}")
    nominal = nominal_counters(name, int(cell["budget"]), head.block_size if head else None,
                               dict(spec.get("options") or []))
    if nominal is None:
        raise JfbenchError(
            f"run {str(run.path)!r} has no draft counters for drafter {name!r}, and its cost cannot be derived "
            f"from the drafter kind: {fix}"
        )
    return nominal[0], nominal[1], "nominal"


def _row(model: CostModel, cell: pd.Series, b: int, passes: float, entries: float, source: str,
         head: HeadInfo | None, hardware: str) -> dict[str, Any]:
    budget, tau, nodes = int(cell["budget"]), float(cell["tau"]), float(cell["tree_nodes"])
    head_model: ModelShape | None = head_shape(model.target, head.layers, head.taps) if head else None
    ar_s = model.ar_s(b)
    # A drafter with no head forwards drafts on the host: its measured seconds per sequence-step carry
    # over (the host assumed as fast as the run's); a head's forwards are priced by the cost model.
    host = passes == 0 and not pd.isna(cell["host_draft_s"])
    per_sequence = float(cell["host_draft_s"]) / int(cell["batch_size"]) if host else 0.0
    draft_s = per_sequence * b if host else model.draft_s(head_model, passes, entries, b)
    verify_s = model.verify_s(nodes, b)
    bookkeeping_s = model.bookkeeping_s(nodes, b)
    step_s = draft_s + verify_s + bookkeeping_s
    speedup = tau * ar_s / step_s
    return {
        "suite": cell["suite"], "drafter": cell["drafter"], "variant": cell["variant"],
        "temperature": float(cell["temperature"]), "budget": budget,
        "batch_size": b, "measured_batch_size": int(cell["batch_size"]), "tau": tau, "tree_nodes": nodes,
        "draft_passes": passes,
        "draft_entries": entries, "counters": source, "draft_priced": "host (measured)" if host else "cost model",
        "head_layers": head.layers if head else 0,
        "head_taps": head.taps if head else 0, "ar_s": ar_s, "draft_s": draft_s, "verify_s": verify_s,
        "bookkeeping_s": bookkeeping_s, "step_s": step_s,
        "verify_bound": "measured" if model.calibration else model.forward(model.target, nodes, b).bound,
        "ar_tokens_per_s": b / ar_s, "tokens_per_s": b * tau / step_s, "speedup": speedup, "eta": speedup / tau,
        "measured_speedup": float(cell[SPEEDUP]) if b == int(cell["batch_size"]) else np.nan,
        "hardware": hardware, "target": model.target.name,
    }


def write_projection(table: pd.DataFrame, folder: Path, stem: str = "projection") -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{stem}.parquet", folder / f"{stem}.csv"]
    table.to_parquet(paths[0], index=False)
    table.to_csv(paths[1], index=False)
    return paths


def warn(notes: list[str]) -> None:
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)


def run_context(run: Run) -> int | None:
    """Mean tokens in the KV cache while decoding: mean prompt + half the mean new tokens (None
    without requests.parquet)."""
    path = run.path / "requests.parquet"
    if not path.is_file():
        return None
    import pyarrow.parquet as pq

    if not {"prompt_tokens", "new_tokens"} <= set(pq.read_schema(path).names):
        return None
    requests = pd.read_parquet(path, columns=["prompt_tokens", "new_tokens"])
    return int(round(requests["prompt_tokens"].mean() + requests["new_tokens"].mean() / 2))
