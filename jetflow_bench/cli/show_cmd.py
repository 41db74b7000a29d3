"""`jfbench show RUN`: a run folder's summary as tables (rich, markdown) or rows (csv, json)."""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from jetflow_bench.cli import app
from jetflow_bench.cli.output import TableFormat, TableFormatOpt, emit, markdown, print_table, rich_table
from jetflow_bench.cli.summary_view import LEGEND, SAMPLED, column_help, pick_columns, summary_rows
from jetflow_bench.core.arms import arm_label
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.progress import say

if TYPE_CHECKING:  # pandas loads when a table is shown, not for `--help`
    import pandas as pd


class ShowTable(str, Enum):
    summary = "summary"
    ablation = "ablation"
    cells = "cells"
    tree = "tree"
    headroom = "headroom"
    load = "load"


def compact_ablation(ablation: pd.DataFrame) -> pd.DataFrame:
    """The delta table at a glance; a transfer's arms (``other_target``, `ablate --allow-other-target`)
    carry the mark a sweep puts in their variant."""
    import pandas as pd

    from jetflow_bench.sweep.arms import OTHER_TARGET

    def arm(variant: str, row: tuple) -> str:
        return f"{variant},{OTHER_TARGET}" if isinstance(getattr(row, "other_target", None), str) else variant

    return pd.DataFrame([{
        "arm": f"{r.drafter}[{arm(r.variant, r)}]", "vs": arm(getattr(r, "compared_with", "default"), r),
        "suite": r.suite, "B": r.budget, "bs": r.batch_size,
        "T": f"{getattr(r, 'temperature', 0.0):g}", "n": r.n_prompts,
        "tau": _f(r.tau, 2), "d tau": f"{_f(r.tau_delta, 2, sign=True)} [{_f(r.tau_delta_lo, 2)}, {_f(r.tau_delta_hi, 2)}]",
        "decode x": _f(r.speedup_decode_micro, 2),
        "d x": f"{_f(r.speedup_delta, 2, sign=True)} [{_f(r.speedup_delta_lo, 2)}, {_f(r.speedup_delta_hi, 2)}]",
    } for r in ablation.itertuples()])


def _f(value: float, digits: int, sign: bool = False) -> str:
    import pandas as pd

    if value is None or pd.isna(value):
        return ""
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def _read(run: Path, name: str) -> pd.DataFrame:
    """``name``.parquet, else its .csv twin (with a warning when the parquet is damaged; silently where
    a published folder kept the CSV alone); an error naming the file if neither reads."""
    path, twin = run / f"{name}.parquet", run / f"{name}.csv"
    if not path.exists() and not twin.exists():
        hints = {"ablation": "run `jfbench ablate`", "nodes": "the run predates per-node rows: re-run it with --force",
                 "marginals": "no arm's trees replay (dflash, jetflow at a fixed budget), or the run predates them: "
                              "re-run it with --force"}
        unfinished = _unfinished(run)
        hint = hints.get(name, "no cell has finished yet" + (f"; {unfinished}" if unfinished else ""))
        raise JfbenchError(f"{path} does not exist ({hint}): check the run folder")
    import pandas as pd

    from jetflow_bench.measure.integrity import READ_ERRORS, reason, warn
    from jetflow_bench.report.loading import CELL_KEYS, REBUILD, with_cell_keys

    problem = None
    if path.exists():
        try:
            return _paired(name, with_cell_keys(pd.read_parquet(path)))
        except READ_ERRORS as err:
            problem = f"{path} is unreadable ({reason(err)})"
    try:
        frame = with_cell_keys(pd.read_csv(twin))
    except (*READ_ERRORS, FileNotFoundError) as err:
        why = f"{problem}, and {twin.name} cannot stand in for it" if problem else f"{twin} is unreadable ({reason(err)})"
        raise JfbenchError(f"{why}: {REBUILD}") from None
    missing = [c for c in (*CELL_KEYS, "tau") if c not in frame.columns] if name == "summary" else []
    if missing:
        raise JfbenchError(f"{problem or twin}: {twin.name} lacks the columns {missing}: {REBUILD}")
    if problem:
        warn(f"{problem}; showing {twin.name} instead")
    return _paired(name, frame)


def _paired(name: str, frame: pd.DataFrame) -> pd.DataFrame:
    """A summary with no speed-up where its cell had no baseline timed beside it (`paired_only`)."""
    from jetflow_bench.report.loading import paired_only

    return paired_only(frame) if name == "summary" else frame


def _caption(run: Path, manifest: dict, summary: pd.DataFrame, compact: bool) -> str:
    """The legend (compact view), then where the numbers come from, one line each."""
    from jetflow_bench.report.loading import SAMPLED_LOSSLESS, old_recipe_heads
    from jetflow_bench.sweep.arms import OTHER_TARGET
    from jetflow_bench.sweep.efficiency import efficiency_line

    config = manifest.get("config", {})
    done = len(list((run / "cells").glob("*.json"))) if (run / "cells").is_dir() else len(summary)  # published: tables only
    lines = [LEGEND] if compact else []
    if summary["temperature"].ne(0).any():
        lines.append(f"diverged '{SAMPLED}' (T > 0): {SAMPLED_LOSSLESS}, not compared token by token")
    unfinished = _unfinished(run)
    cells = f"{done}/{manifest.get('n_cells', '?')} cells" + (f" (+ {unfinished})" if unfinished else "")
    lines.append("; ".join([cells, f"config {manifest.get('config_hash')}",
                            f"{manifest.get('device')}"]) + (" · --wide: every column" if compact else ""))
    lines.append(f"target {config.get('target')}")
    lines += [f"{arm}: head trained under the {old}" for arm, old in old_recipe_heads(run, manifest).items()]
    transfer = dict(config.get("extra") or []).get("other_target")
    if transfer:
        lines.append(f"{OTHER_TARGET}: every head was trained on target {transfer}, not this one (--allow-other-target)")
    efficiency = efficiency_line(manifest.get("engine_efficiency"))
    if efficiency:
        lines.append(efficiency)
    if config.get("device", "").startswith("cpu"):
        lines.append("CPU: verification cost grows with B, so τ is the hardware-independent figure")
    lines.extend(evidence_lines(summary))
    return "\n".join(lines)


def _unfinished(run: Path) -> str:
    """How far the cells still running (or killed midway) got, from their journals; "" if none did."""
    from jetflow_bench.sweep.store import PARTIAL

    batches = [len(list(cell.glob("batch-*.json"))) for cell in sorted((run / PARTIAL).glob("*/"))]
    if not batches:
        return ""
    return f"{len(batches)} unfinished, {sum(batches)} prompt batch(es) decoded so far: a re-run resumes them"


def evidence_lines(summary: pd.DataFrame) -> list[str]:
    """What the speed-ups rest on (`report.tables.evidence_notes`), with the decode column's marks."""
    from jetflow_bench.cli.summary_view import NOISE_MARK, UNPAIRED_MARKS
    from jetflow_bench.report.loading import NO_SPEEDUP
    from jetflow_bench.report.tables import evidence_notes

    lines = evidence_notes(summary, dict(zip(NO_SPEEDUP, UNPAIRED_MARKS, strict=True)))
    if "speedup_distinct" in summary and summary["speedup_distinct"].eq(False).any():
        lines.append(f"{NOISE_MARK}: its CI overlaps the A/A noise floor: not distinguishable from 1 here")
    return lines


def _tree_rows(shape: pd.DataFrame, what: str) -> list[dict[str, str]]:
    """One row per arm: mean ``what`` (drafted or accepted) nodes per drafting step at each depth."""
    from jetflow_bench.core.arms import arm_label
    from jetflow_bench.core.budget_policy import budget_label
    from jetflow_bench.report.tree_shape import ARM, by_depth

    wide = by_depth(shape, what)
    sampled = wide["temperature"].ne(0).any()
    depths = [c for c in wide.columns if c not in (*ARM, "steps")]
    return [{"suite": r["suite"], "arm": arm_label(r["drafter"], r["variant"]), "B": budget_label(r["budget"]),
             "batch": str(r["batch_size"]), **({"T": f"{r['temperature']:g}"} if sampled else {}),
             "steps": str(int(r["steps"])), **{c: _f(r[c], 2) for c in depths}} for r in wide.to_dict("records")]


def _show_tree(run: Path, format: TableFormat) -> None:
    from jetflow_bench.report.tree_shape import NODE_CAP, tree_shape

    shape = tree_shape(_read(run, "nodes"))
    if shape.empty:
        raise JfbenchError(f"{run / 'nodes.parquet'} holds no drafted nodes: they are recorded for drafters that "
                           "score nodes by log-prob (eagle, dflash, jetflow) on the hf engine")
    if format in (TableFormat.csv, TableFormat.json):
        emit(_records(shape), format)
        return
    for what in ("drafted", "accepted"):
        title = f"{run.name}: {what} nodes per step, by tree depth"
        _print_rows(_tree_rows(shape, what), title, format)
    capped = f" (over a tree's first {NODE_CAP} nodes, the ones recorded)" if shape["budget"].gt(NODE_CAP).any() else ""
    print(f"d1: first tokens; means over the verify steps that drafted, repeats pooled{capped}")


def _show_headroom(run: Path, format: TableFormat) -> None:
    from jetflow_bench.report.headroom import INF, headroom_table, replay_check

    tables = [_read(run, name) for name in ("marginals", "steps", "requests")]  # read once, for both tables
    table = headroom_table(*tables)
    if table.empty:
        raise JfbenchError(f"{run / 'marginals.parquet'} holds no replayable steps: they are recorded for drafters whose "
                           "trees replay from pass 1 (dflash, jetflow without refinement) at a fixed budget on the hf "
                           "engine; re-run the sweep with --force if it predates them")
    if format in (TableFormat.csv, TableFormat.json):
        emit(json.loads(table.to_json(orient="records")), format)  # blanks (not measured) as null / empty
        return
    rows = [{**_replay_row(r), "steps": str(r["steps"])} for r in table.to_dict("records")]
    _print_rows(rows, f"{run.name}: headroom, the trees replayed at other budgets", format)
    print(f"replays B: the measured budget whose cells were replayed (at another B an estimate at its positions); "
          f"B = {INF}: an unlimited top-K tree (tau_inf); repeats pooled")
    check = replay_check(*tables)
    if not check.empty:
        rows = [{**_replay_row(r), "replayed / tau - 1": f"{r['error']:+.3f}"} for r in check.to_dict("records")]
        print()
        _print_rows(rows, f"{run.name}: the estimate checked, each measured B replayed from another measured B", format)
        print("how far the estimates above can be off: the replay at another budget's positions against the measured tau")


def _replay_row(r: dict) -> dict[str, str]:
    """The columns a headroom row and a replay-check row share."""
    return {"suite": r["suite"], "arm": r["arm"], "batch": str(r["batch_size"]), "B": str(r["budget"]),
            "replays B": str(r["source"]), "tau": _f(r["tau"], 3), "tau replayed": _f(r["tau_replayed"], 3)}


def _print_rows(rows: list[dict[str, str]], title: str, format: TableFormat) -> None:
    if format == TableFormat.markdown:
        print(f"**{title}**\n\n{markdown(rows)}\n")
    else:
        print_table(Console(), rich_table(rows, title, left=("suite", "arm")))


WideOpt = Annotated[bool, typer.Option("--wide", help="Every column of the summary table (see the list above).")]
ColumnsOpt = Annotated[
    str | None, typer.Option("--columns", help="Comma-separated columns to show after suite and arm, e.g. tau,alpha,tok_s.")
]
SHOW_HELP = f"""Print a run's summary (and ablation) as tables, or its rows as csv/json.

table/markdown: one row per arm, repeats pooled. The default columns are suite, arm, budget, batch,
tau, alpha, decode and diverged (and temperature when the run samples); --wide shows all of them,
--columns picks some. csv/json: every column of summary.parquet (or --table ablation / cells), one
row per cell, for scripts. --table tree, in every format: how each arm shaped its trees, as the
mean drafted and accepted nodes per verify step at each depth (from nodes.parquet). --table
headroom, in every format: the block drafters' trees (dflash, jetflow) replayed offline at B = 16 to
1024 from their recorded pass-1 top-K, beside the measured tau, and tau_inf, an unlimited top-K
tree's bound (docs/methodology.md, "Headroom").

Columns (--columns takes these names; docs/methodology.md defines each figure):

{column_help()}

Examples:

    jfbench show results/qwen8b

    jfbench show results/qwen8b --wide

    jfbench show results/qwen8b --columns tau,acc_step,tok_s,e2e

    jfbench show results/qwen8b --format csv > summary.csv

    jfbench show results/ablate-head --format json --table ablation | jq '.[0]'

    jfbench show results/qwen8b --table tree

    jfbench show results/qwen8b --table headroom --format csv
"""


@app.command("show", help=SHOW_HELP)
def show(
    run: Annotated[Path, typer.Argument(help="A run folder written by `jfbench sweep` or `jfbench ablate`.")],
    format: TableFormatOpt = TableFormat.table,
    table: Annotated[ShowTable, typer.Option(
        "--table", help="Which table csv/json print (all its columns); tree: nodes per tree depth, headroom: the trees "
        "replayed at other budgets, in any format.",
    )] = ShowTable.summary,
    wide: WideOpt = False,
    columns: ColumnsOpt = None,
    slo: Annotated[str | None, typer.Option(
        "--slo", help="--table load: goodput counts the requests within these limits, e.g. ttft=0.5,tpot=0.05 (seconds).",
    )] = None,
) -> None:
    from jetflow_bench.sweep.store import MANIFEST, read_json

    names = pick_columns(wide, columns)
    manifest = read_json(run / MANIFEST)
    if manifest is None and not (run / MANIFEST).is_file():
        raise JfbenchError(f"{run} holds no jfbench run ({MANIFEST} missing): pass a folder written by `jfbench sweep`")
    from jetflow_bench.measure.integrity import warn, warn_damaged_cells

    if manifest is None:
        warn(f"{run / MANIFEST} is not valid JSON; going on without the run's provenance")
        manifest = {}
    warn_damaged_cells(run / "cells")
    if table is ShowTable.tree:
        _show_tree(run, format)
        return
    if table is ShowTable.headroom:
        _show_headroom(run, format)
        return
    if table is ShowTable.load:
        _show_load(run, format, slo, manifest.get("config", {}))
        return
    if format in (TableFormat.csv, TableFormat.json):
        frame = _read(run, table.value)
        if format == TableFormat.csv:
            frame.to_csv(sys.stdout, index=False)
        else:
            print(json.dumps(json.loads(frame.to_json(orient="records")), indent=1))
        return
    summary = _read(run, "summary")
    views = [("summary", summary_rows(summary, names))]
    if (run / "ablation.parquet").exists():
        views.append(("ablation (variant - the arm in 'vs')", _records(compact_ablation(_read(run, "ablation")))))
    if format == TableFormat.markdown:
        print("\n\n".join(f"**{title}**\n\n{markdown(rows)}" for title, rows in views))
        return
    console = Console(highlight=False)
    for title, rows in views:
        print_table(console, rich_table(rows, f"{run.name}: {title}", left=("suite", "arm", "vs", "B")))
        if title == "summary":  # under the table, not a caption: a caption wraps at the table's width
            for line in _caption(run, manifest, summary, names is None).splitlines():
                say(line, file=sys.stdout)


def _show_load(run: Path, format: TableFormat, slo_text: str | None, config: dict) -> None:
    """`--table load`: latency per load level, the break-even load per arm x budget, the best budget per level."""
    from jetflow_bench.core.budget_policy import budget_label
    from jetflow_bench.measure.serving import STATS, parse_slo
    from jetflow_bench.report.load import best_budgets, break_even, load_table

    slo = parse_slo(slo_text)
    requests = _read(run, "requests")
    if not requests["load"].ne("").any():
        raise JfbenchError(f"{run} has no load cells: run `jfbench sweep ... --load poisson:1,4` (or concurrency:1,4)")
    table = load_table(requests, _read(run, "cells"), slo, config.get("n_boot", 1000), config.get("seed", 0))
    if format in (TableFormat.csv, TableFormat.json):
        emit(_records(table), format)
        return
    ms = lambda v: _f(v * 1e3, 1)  # noqa: E731
    levels = [{
        "suite": r.suite, "arm": arm_label(r.drafter, r.variant), "B": budget_label(r.budget), "bs": r.batch_size, "load": r.load,
        "τ": _f(r.tau, 2), "TTFT ms mean/p50/p90/p99": "/".join(ms(getattr(r, f"ttft_{s}_s")) for s in STATS),
        "TPOT ms mean/p50/p90/p99": "/".join(ms(getattr(r, f"tpot_{s}_s")) for s in STATS),
        "ITL ms p50/p99": f"{ms(r.itl_median_s)}/{ms(r.itl_p99_s)}", "E2EL s mean/p99": f"{_f(r.e2el_mean_s, 2)}/{_f(r.e2el_p99_s, 2)}",
        "tok/s": _f(r.output_tok_s, 1), "goodput req/s": _f(r.goodput, 2) if slo else "",
        "TPOT × [95% CI]": f"{_f(r.tpot_speedup, 2)} [{_f(r.tpot_speedup_lo, 2)}, {_f(r.tpot_speedup_hi, 2)}]",
        "A/A [95% CI]": f"{_f(r.noise_aa, 2)} [{_f(r.noise_aa_lo, 2)}, {_f(r.noise_aa_hi, 2)}]",
        "tput ×": _f(r.tput_speedup, 2),
    } for r in table.itertuples()]
    even = [{"suite": r.suite, "arm": r.arm, "B": budget_label(r.budget), "bs": r.batch_size, "load kind": r.load_kind,
             "break-even load": r.break_even, "shown to pay at": r.pays_at, "TPOT × lowest load": _f(r.speedup_at_lowest, 2),
             "TPOT × highest load": _f(r.speedup_at_highest, 2)} for r in break_even(table).itertuples()]
    best = [{"suite": r.suite, "arm": arm_label(r.drafter, r.variant), "bs": r.batch_size, "load": r.load,
             "best B": r.budget, "TPOT × [95% CI]": f"{_f(r.tpot_speedup, 2)} [{_f(r.tpot_speedup_lo, 2)}, {_f(r.tpot_speedup_hi, 2)}]",
             **({"auto: TPOT × [95% CI]": f"{_f(r.auto_speedup, 2)} [{_f(r.auto_speedup_lo, 2)}, {_f(r.auto_speedup_hi, 2)}]",
                 "auto ties best": {True: "yes", False: "no"}.get(r.auto_tied, ""), "auto: chosen B (share of steps)": r.chosen_budgets if isinstance(getattr(r, "chosen_budgets", None), str) else ""}
                if hasattr(r, "auto_speedup") else {})}
            for r in best_budgets(table, _read(run, "summary")).itertuples()]
    views = [("latency per load level", levels), ("break-even load (TPOT speed-up's 95% CI reaches 1 or the A/A band)", even),
             ("best budget per load level", best)]
    if format == TableFormat.markdown:
        print("\n\n".join(f"**{title}**\n\n{markdown(rows)}" for title, rows in views if rows))
    else:
        console = Console(highlight=False)
        for title, rows in views:
            if rows:
                print_table(console, rich_table(rows, f"{run.name}: {title}", left=("suite", "arm")))
    limits = ", ".join(f"{k} <= {v:g} s" for k, v in slo.items()) or "none given (--slo)"
    print(f"percentiles over the requests of each cell, means over repeats; ITL per streamed chunk (one per step); "
          f"speed-ups vs plain decoding at the same load, A/A: plain decoding against its second copy there; SLO: {limits}")


def _records(frame: pd.DataFrame) -> list[dict]:
    return frame.to_dict("records")
