"""The report's tables, computed from run summaries and kept as plain cells for the template.

Every table is a `Table` of `Cell`s carrying both the text shown and the raw value the page sorts
by, so one template macro renders (and one script sorts) all of them. Numbers are rounded for
reading only; the raw values stay in the data attributes and in the run's Parquet files.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import pandas as pd

from jetflow_bench.core.arms import AR_ARM
from jetflow_bench.core.budget_policy import budget_label
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.measure.integrity import warn
from jetflow_bench.report.loading import (
    CELL_KEYS,
    NO_SPEEDUP,
    SAMPLED_LOSSLESS,
    SPEEDUP,
    Run,
    align,
    old_recipe_heads,
)
from jetflow_bench.report.palette import drafter_color, drafter_order
from jetflow_bench.report.tree_shape import by_depth, tree_shape


@dataclass(frozen=True)
class Cell:
    text: str
    sort: str  # what the column sorts by: a JS number literal when `numeric`, else the text
    numeric: bool = False
    css: str = ""  # "bad" / "good" / "" — colours the cell
    color: str = ""  # a drafter's colour swatch, for drafter-name cells


@dataclass(frozen=True)
class Table:
    columns: list[str]
    rows: list[list[Cell]] = field(default_factory=list)


def fmt(value: object, digits: int = 3) -> str:
    """Human text for a table value: NaN/None → "—", floats to `digits` significant decimals."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) >= 1e4 or (value and abs(value) < 1e-3) else f"{value:.{digits}f}"
    return str(value)


def _sort_key(number: float) -> str:
    """A JS-parsable number; NaN sorts below every number."""
    return "-Infinity" if math.isnan(number) else repr(number)


def cell(value: object, css: str = "", digits: int = 3) -> Cell:
    """A Cell for `value`: numbers sort numerically (NaN lowest), the rest as text."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Cell(fmt(value, digits), _sort_key(float(value)), True, css)
    return Cell(fmt(value), fmt(value), css=css)


def drafter_cell(name: str) -> Cell:
    return Cell(name, name, color=drafter_color(name))


def _interval(value: float, lo: float, hi: float) -> Cell:
    """"2.10× [1.80, 2.40]", green when the whole CI is above 1×, red when it is below."""
    text = f"{fmt(value, 2)}× [{fmt(lo, 2)}, {fmt(hi, 2)}]" if not math.isnan(value) else "—"
    return Cell(text, _sort_key(value), True, "good" if lo > 1 else "bad" if hi < 1 else "")


def headline(run: Run) -> Table:
    """Best decode speed-up per drafter and suite (over budgets and batch sizes, mean over repeats),
    where it was reached, and the largest τ for comparison."""
    cells = run.cells()
    table = Table(["suite", "drafter", "best speed-up [95% CI]", "budget", "batch", "τ there", "best τ", "at budget"])
    if cells.empty or SPEEDUP not in cells:
        return table
    cols = [SPEEDUP, f"{SPEEDUP}_lo", f"{SPEEDUP}_hi", "tau"]
    means = cells.groupby(["suite", "drafter", "budget", "batch_size"], as_index=False)[cols].mean()
    for (suite, drafter), group in means.groupby(["suite", "drafter"]):
        fastest = group.loc[group[SPEEDUP].idxmax()] if group[SPEEDUP].notna().any() else group.iloc[0]
        most = group.loc[group["tau"].idxmax()]
        table.rows.append([
            cell(suite), drafter_cell(drafter),
            _interval(fastest[SPEEDUP], fastest[f"{SPEEDUP}_lo"], fastest[f"{SPEEDUP}_hi"]),
            cell(budget_label(int(fastest["budget"]))), cell(int(fastest["batch_size"])),
            cell(fastest["tau"], digits=2), cell(most["tau"], digits=2), cell(budget_label(int(most["budget"]))),
        ])
    order = {name: k for k, name in enumerate(drafter_order(means["drafter"]))}
    table.rows.sort(key=lambda row: (row[0].text, order[row[1].text]))
    return table


def evidence_notes(summary: pd.DataFrame, marks: dict[str | None, str] | None = None) -> list[str]:
    """What a run's speed-ups rest on, one line each: the repeats and sessions of the in-session
    pairs, the A/A noise floor per batch size, and why cells have no speed-up (prefixed by the
    ``marks`` a table shows for each reason in `NO_SPEEDUP`'s keys, when given)."""
    lines = []
    notes = summary["speedup_note"] if "speedup_note" in summary else pd.Series("", index=summary.index)
    paired = summary[notes.eq("")]
    if len(paired):
        sessions = paired["session"].nunique() if "session" in paired else 0
        lines.append(f"speed-ups: vs the AR baseline timed beside each arm in its session; {paired['repeat'].nunique()} "
                     f"repeat(s), {sessions} session(s)")
    noise = summary.dropna(subset=["noise_aa"]) if "noise_aa" in summary else summary.iloc[:0]
    keys = ["batch_size", *(["load"] if "load" in noise else [])]
    noise = noise.drop_duplicates(keys).sort_values(keys)
    for r in noise.itertuples():
        at = f" at batch {r.batch_size}" if len(noise) > 1 else ""
        at += f", load {r.load}" if getattr(r, "load", "") else ""
        lines.append(f"noise floor{at}: A/A {r.noise_aa:.2f}× [{r.noise_aa_lo:.2f}, {r.noise_aa_hi:.2f}] "
                     f"(AR timed against itself, {int(r.noise_rounds)} pairs)")
    for key, note in NO_SPEEDUP.items():
        count = int(notes.eq(note).sum())
        if count:
            lines.append(f"– {marks[key]}: no speed-up: {note}" if marks else f"no speed-up for {count} cell(s): {note}")
    return lines


def frame_table(frame: pd.DataFrame, bad: dict[str, float] | None = None) -> Table:
    """Every row and column of `frame`; a cell in column c is marked bad when it exceeds bad[c]."""
    bad = bad or {}
    table = Table([str(c) for c in frame.columns])
    for record in frame.itertuples(index=False):
        row = []
        for column, value in zip(frame.columns, record, strict=True):
            value = value.item() if hasattr(value, "item") else value
            if column == "drafter":
                row.append(drafter_cell(str(value)))
                continue
            flagged = column in bad and isinstance(value, int | float) and value > bad[column]
            row.append(cell(value, "bad" if flagged else ""))
        table.rows.append(row)
    return table


def summary_table(run: Run) -> Table:
    """The full summary (every cell and column; the JSON histogram is left to the Parquet file)."""
    frame = run.summary.drop(columns=["accept_hist"], errors="ignore")
    return frame_table(frame, bad={"lossless_unexcused": 0})


def depth_table(run: Run, depths: int = 4) -> Table:
    """Where each drafting cell wins or loses acceptance: a_1, the conditional p_2..p_depths
    (p_d = a_d / a_{d-1}, the chance of one more accepted token given d - 1) and the rank-1
    faithfulness share (jetflow_bench.engine.faithfulness); columns a run lacks are left out."""
    summary = run.summary[run.summary["drafter"] != AR_ARM]
    wanted = ["a_1", *(f"p_{d}" for d in range(2, depths + 1)), "rank1_faithful"]
    frame = summary[[*CELL_KEYS, *(c for c in wanted if c in summary)]]
    return frame_table(frame.sort_values(list(CELL_KEYS)))


def shape_table(run: Run) -> Table:
    """Drafted nodes per step at each tree depth, one row per arm (`jetflow_bench.report.tree_shape`);
    empty when the run has no readable node rows (`Run.nodes` warns about a damaged file)."""
    if run.nodes is None:
        return Table([])
    try:
        shape = tree_shape(run.nodes)
    except JfbenchError as err:
        warn(f"{err}; the report shows no tree shapes")
        return Table([])
    return frame_table(by_depth(shape, "drafted")) if len(shape) else Table([])


def divergent_cells(run: Run) -> pd.DataFrame:
    """Cells with at least one unexcused lossless divergence (cell keys + the count)."""
    if "lossless_unexcused" not in run.summary:
        return run.summary.iloc[0:0][list(CELL_KEYS)]
    rows = run.summary[run.summary["lossless_unexcused"].fillna(0) > 0]
    return rows[[*CELL_KEYS, "lossless_unexcused"]]


def quality_table(run: Run) -> Table:
    """Accuracy per suite × drafter × temperature (mean over budgets, batch sizes, repeats) beside the
    AR baseline's, with divergence counts. Greedy speculative decoding is lossless, so the two
    accuracies must agree; at temperature > 0 the counts give way to SAMPLED_LOSSLESS and the
    accuracies agree within their sampling noise."""
    columns = [c for c in ("accuracy", "baseline_accuracy", "lossless_unexcused", "lossless_excused")
               if c in run.summary]
    if not columns:
        return Table(["suite", "drafter", "temperature"])
    stats = run.summary.groupby(["suite", "drafter", "temperature"], as_index=False).agg(
        {c: ("sum" if c.startswith("lossless") else "mean") for c in columns}
    )
    counts = [c for c in columns if c.startswith("lossless")]
    if counts and (stats["temperature"] > 0).any():
        stats[counts] = stats[counts].astype(object)
        stats.loc[stats["temperature"] > 0, counts] = SAMPLED_LOSSLESS
    return frame_table(stats, bad={"lossless_unexcused": 0})


def delta_table(base: Run, other: Run) -> tuple[Table, int, int]:
    """τ, speed-up and throughput of `other` against `base` on matching cells.

    Returns the table (relative changes in %), the number of cells only in `base` and the number
    only in `other`.
    """
    metrics = [m for m in ("tau", SPEEDUP, "tokens_per_s") if m in base.summary and m in other.summary]
    joined = align(base.summary[[*CELL_KEYS, *metrics]], other.summary[[*CELL_KEYS, *metrics]])
    both = joined[joined["_merge"] == "both"]
    columns = list(CELL_KEYS)
    for metric in metrics:
        columns += [f"{metric} ({base.name})", f"{metric} ({other.name})", f"Δ {metric} %"]
    table = Table(columns)
    for _, row in both.iterrows():
        cells = [drafter_cell(row[k]) if k == "drafter" else cell(row[k]) for k in CELL_KEYS]
        for metric in metrics:
            old, new = float(row[f"{metric}_base"]), float(row[f"{metric}_run"])
            change = 100 * (new - old) / old if old else float("nan")
            css = "bad" if change < -5 else "good" if change > 5 else ""
            cells += [cell(old), cell(new), cell(change, css, digits=1)]
        table.rows.append(cells)
    counts = joined["_merge"].value_counts()
    return table, int(counts.get("left_only", 0)), int(counts.get("right_only", 0))


def manifest_items(run: Run) -> list[tuple[str, str]]:
    """(key, text) pairs of the manifest, the provenance fields first; nested values as JSON."""
    first = ("command", "adopted_cells", "config_hash", "device", "git_commit", "versions", "seeds", "started", "finished")
    keys = [k for k in first if k in run.manifest] + [k for k in run.manifest if k not in first]
    old = old_recipe_heads(run.path, run.manifest)
    heads = [("heads under an old recipe", json.dumps(old, indent=1, sort_keys=True))] if old else []
    transfer = dict((run.manifest.get("config") or {}).get("extra") or []).get("other_target")
    heads += [("every head trained on another target (--allow-other-target)", transfer)] if transfer else []
    return heads + [
        (key, json.dumps(run.manifest[key], indent=1, sort_keys=True) if isinstance(run.manifest[key], dict | list)
         else str(run.manifest[key]))
        for key in keys
    ]
