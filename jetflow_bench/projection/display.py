"""How `jfbench project` shows a projection: one table and the list of assumptions behind it."""

from __future__ import annotations

import pandas as pd
from rich.table import Table

from jetflow_bench.core.arms import arm_label
from jetflow_bench.projection.cost import CostModel

PROJECTION_LABEL = "projection, not a measurement"


def projection_table(table: pd.DataFrame, hardware: str) -> Table:
    """Rows suite × drafter × budget; per projected batch size its speed-up (* = best budget there),
    then the speed-up the run itself measured on its own device."""
    batches = sorted(table["batch_size"].unique())
    several_suites = table["suite"].nunique() > 1
    several_temperatures = table["temperature"].nunique() > 1
    out = Table(title=f"Projected speed-up on {hardware}, {table['target'].iloc[0]} ({PROJECTION_LABEL})")
    lead = (["suite"] if several_suites else []) + (["T"] if several_temperatures else [])
    for col in lead + ["drafter", "B", "τ", "passes", "entries"]:
        out.add_column(col, justify="right")
    for b in batches:
        out.add_column(f"b={b}", justify="right")
    out.add_column("measured", justify="right")
    keys = ["suite", "temperature", "drafter", "variant", "budget"]
    for (suite, temperature, drafter, variant, budget), rows in table.groupby(keys, sort=True):
        first = rows.iloc[0]
        name = arm_label(drafter, variant)
        cells = ([suite] if several_suites else []) + ([f"{temperature:g}"] if several_temperatures else []) + [
            name, str(budget), f"{first['tau']:.2f}", f"{first['draft_passes']:g}", f"{first['draft_entries']:.0f}"]
        for b in batches:
            row = rows[rows["batch_size"] == b].iloc[0]
            cells.append(f"{row['speedup']:.2f}x{'*' if row['best'] else ''}")
        measured = rows["measured_speedup"].dropna()
        cells.append(f"{measured.iloc[0]:.2f}x" if len(measured) else "—")
        out.add_row(*cells)
    out.caption = "* best budget at that batch size; measured = the run's own decode speed-up on its device"
    return out


def _flops(rate: float) -> str:
    if rate > 1e18:  # a calibration whose verify time did not grow with FLOPs (files from before fit_profile's floor)
        return "unbounded (no slope in the calibration)"
    return f"{rate / 1e12:,.1f} TFLOP/s" if rate >= 1e12 else f"{rate / 1e9:,.1f} GFLOP/s"


def assumptions(model: CostModel, table: pd.DataFrame) -> list[str]:
    """Every number the projection rests on, one line each."""
    hw, target = model.hardware, model.target
    lines = [
        f"hardware: {hw.name} — {hw.description}",
        f"  memory bandwidth {hw.memory_bandwidth / 1e9:,.1f} GB/s × efficiency {hw.bandwidth_efficiency:.3f}; "
        f"compute {_flops(hw.peak_flops)} × efficiency {hw.compute_efficiency:.3f}",
        f"  fixed cost {hw.layer_overhead_s * 1e6:.1f} µs per layer unit per forward; bookkeeping "
        f"{hw.bookkeeping_s * 1e6:.1f} µs per speculative step",
        f"target: {target.name} — {target.layers} layers, hidden {target.hidden}, "
        f"{target.q_heads}/{target.kv_heads} q/kv heads, vocab {target.vocab}"
        + (f", {target.experts} experts ({target.experts_per_token} active)" if target.experts else ""),
        f"weights {model.dtype_bytes} bytes/parameter; context {model.context} tokens per sequence in the KV cache",
        "τ, draft counters and verified tree sizes: the run's (greedy τ does not depend on batch size); "
        "AR step = verify of 1 token",
        "speed-up = τ · t_AR / (t_draft + t_verify + bookkeeping); η = speed-up / τ",
    ]
    if model.calibration is not None:
        lines.append(f"verify and AR steps: measured table {model.calibration.path} ({model.calibration.device})")
    heads = table[table["head_layers"] > 0][["drafter", "head_layers", "head_taps"]].drop_duplicates()
    for row in heads.itertuples():
        lines.append(f"head of {row.drafter}: {row.head_layers} layer(s) of the target's width, fusing {row.head_taps} taps")
    if (table["counters"] == "nominal").any():
        lines.append("draft counters NOT recorded in this run: nominal passes/entries of each drafter kind were used "
                     "(see docs/projection.md); --require-counters refuses such runs")
    lines.append(f"this is a {PROJECTION_LABEL}: docs/projection.md gives every term's source")
    return lines


def measured_vs_projected(table: pd.DataFrame, hardware: str, batch: int) -> Table:
    """The demo's closing table: this machine's measured speed-up beside the projected one."""
    rows = table[(table["batch_size"] == batch) & (table["variant"] == "default")]
    out = Table(title=f"Measured here vs projected on {hardware} ({rows['target'].iloc[0]}, batch {batch})")
    for col in ("suite", "drafter", "B", "τ", "measured speed-up (this CPU)", f"projected on {hardware}"):
        out.add_column(col, justify="right")
    for row in rows.sort_values(["suite", "drafter", "budget"]).itertuples():
        measured = "—" if pd.isna(row.measured_speedup) else f"{row.measured_speedup:.2f}x"
        out.add_row(row.suite, row.drafter, str(row.budget), f"{row.tau:.2f}", measured, f"{row.speedup:.2f}x")
    out.caption = (f"The last column is a {PROJECTION_LABEL}: this run's τ and draft counters priced with the "
                   f"{hardware} cost model (docs/projection.md); `jfbench project` shows every assumption.")
    return out


def policy_table(table: pd.DataFrame, hardware: str) -> Table:
    """`--policy auto`: rows suite × drafter × policy (static budgets, then auto); per batch size the
    replayed speed-up (* = best static budget there), and auto's chosen-budget shares."""
    batches = sorted(table["batch_size"].unique())
    out = Table(title=f"Policy replay on {hardware}, {table['target'].iloc[0]} ({PROJECTION_LABEL})")
    for col in ("suite", "drafter", "policy", "τ"):
        out.add_column(col, justify="right")
    for b in batches:
        out.add_column(f"b={b}", justify="right")
    out.add_column("auto: chosen B per batch size", justify="left")
    for (suite, drafter, variant, _budget), rows in table.groupby(["suite", "drafter", "variant", "budget"], sort=True):
        first = rows.iloc[0]
        name = arm_label(drafter, variant)
        cells = [suite, name, first["policy"], f"{first['tau']:.2f}"]
        for b in batches:
            row = rows[rows["batch_size"] == b].iloc[0]
            mark = "*" if row["best_static"] else ""
            ratio = f" ({row['auto_vs_best_static']:.2f} of best)" if row["policy"] == "auto" else ""
            cells.append(f"{row['speedup']:.2f}x{mark}{ratio}")
        cells.append("; ".join(f"b={r.batch_size}: {r.chosen_budgets}" for r in rows.itertuples() if r.chosen_budgets))
        out.add_row(*cells)
    out.caption = ("static rows: every recorded step re-verified at that budget; auto: BudgetPolicy per batched "
                   "step; * best static budget; (x of best) = auto speed-up / best static speed-up")
    return out
