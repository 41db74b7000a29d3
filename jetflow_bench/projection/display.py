"""How `jfbench project` shows a projection: one table and the list of assumptions behind it."""

from __future__ import annotations

import pandas as pd
from rich.table import Table

from jetflow_bench.projection.cost import CostModel

PROJECTION_LABEL = "projection, not a measurement"


def projection_table(table: pd.DataFrame, hardware: str) -> Table:
    """Rows drafter × budget; per batch size: projected speed-up (* = best budget) and step ms."""
    batches = sorted(table["batch_size"].unique())
    out = Table(title=f"Projected on {hardware}, {table['target'].iloc[0]} ({PROJECTION_LABEL})")
    for col in ("suite", "drafter", "B", "τ", "P", "E", "counters"):
        out.add_column(col, justify="right")
    for b in batches:
        out.add_column(f"b={b} speed-up", justify="right")
        out.add_column(f"b={b} step ms", justify="right")
    out.add_column("measured (run)", justify="right")
    keys = ["suite", "drafter", "variant", "budget"]
    for (suite, drafter, variant, budget), rows in table.groupby(keys, sort=True):
        first = rows.iloc[0]
        name = drafter if variant == "default" else f"{drafter}[{variant}]"
        cells = [suite, name, str(budget), f"{first['tau']:.2f}", f"{first['draft_passes']:g}",
                 f"{first['draft_entries']:.0f}", first["counters"]]
        for b in batches:
            row = rows[rows["batch_size"] == b].iloc[0]
            cells += [f"{row['speedup']:.2f}x{'*' if row['best'] else ''}", f"{row['step_s'] * 1e3:.2f}"]
        measured = rows["measured_speedup"].dropna()
        cells.append(f"{measured.iloc[0]:.2f}x" if len(measured) else "—")
        out.add_row(*cells)
    return out


def assumptions(model: CostModel, table: pd.DataFrame) -> list[str]:
    """Every number the projection rests on, one line each."""
    hw, target = model.hardware, model.target
    lines = [
        f"hardware: {hw.name} — {hw.description}",
        f"  memory bandwidth {hw.memory_bandwidth / 1e9:,.0f} GB/s × efficiency {hw.bandwidth_efficiency:.3f}; "
        f"compute {hw.peak_flops / 1e12:,.1f} TFLOP/s × efficiency {hw.compute_efficiency:.3f}",
        f"  fixed cost {hw.layer_overhead_s * 1e6:.1f} µs per layer unit per forward; bookkeeping "
        f"{hw.bookkeeping_s * 1e6:.1f} µs per speculative step",
        f"target: {target.name} — {target.layers} layers, hidden {target.hidden}, "
        f"{target.q_heads}/{target.kv_heads} q/kv heads, vocab {target.vocab}"
        + (f", {target.experts} experts ({target.experts_per_token} active)" if target.experts else ""),
        f"weights {model.dtype_bytes} bytes/parameter; context {model.context} tokens per sequence in the KV cache",
        "τ and draft counters: the run's (greedy τ does not depend on batch size); AR step = verify of 1 token",
        "speed-up = τ · t_AR / (t_draft + t_verify + bookkeeping); η = speed-up / τ",
    ]
    if model.calibration is not None:
        lines.append(f"verify and AR steps: measured table {model.calibration.path} ({model.calibration.device})")
    heads = table[table["head_layers"] > 0][["drafter", "head_layers", "head_taps"]].drop_duplicates()
    for row in heads.itertuples():
        lines.append(f"head of {row.drafter}: {row.head_layers} layers of the target's width, fusing {row.head_taps} taps")
    if (table["counters"] == "nominal").any():
        lines.append("draft counters NOT recorded in this run: nominal passes/entries of each drafter kind were used "
                     "(see docs/projection.md); --require-counters refuses such runs")
    lines.append(f"this is a {PROJECTION_LABEL}: docs/projection.md gives every term's source")
    return lines
