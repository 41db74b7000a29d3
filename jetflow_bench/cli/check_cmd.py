"""`jfbench check`: the CI regression gate against a committed reference run."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from jetflow_bench.cli import app
from jetflow_bench.cli.output import TableFormat, TableFormatOpt, emit, print_table
from jetflow_bench.core.errors import JfbenchError, writable_folder
from jetflow_bench.core.progress import say
from jetflow_bench.report import DEFAULT_BASELINE

if TYPE_CHECKING:  # report.check reads tables with pandas: imported when `check` runs
    from jetflow_bench.report.check import CheckResult

STYLE = {"fail": "bold red", "warn": "yellow", "info": "cyan", "ok": "green", "missing": "bold red", "new": "cyan"}


def _num(value: float, digits: int = 3) -> str:
    return "—" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _cells_table(result: CheckResult) -> Table:
    """One row per cell: τ and a_1..a_3 on both sides, decode speed-up, status."""
    from jetflow_bench.report.check import cell_label
    from jetflow_bench.report.loading import CELL_KEYS, SPEEDUP

    table = Table(title=f"cells: {result.baseline} (baseline) vs {result.run} (run)")
    for column in ("status", "cell", "τ base", "τ run", "Δτ", "a_1..a_3 run", "speed-up base", "speed-up run"):
        table.add_column(column, justify="left" if column in ("status", "cell") else "right")
    for _, row in result.cells.iterrows():
        depths = "/".join(_num(row.get(f"a_{d}_run", math.nan), 2) for d in (1, 2, 3))
        change = (row["tau_run"] - row["tau_base"]) / row["tau_base"] if row["tau_base"] else math.nan
        table.add_row(
            f"[{STYLE[row['status']]}]{row['status']}[/]", cell_label({k: row[k] for k in CELL_KEYS}),
            _num(row["tau_base"]), _num(row["tau_run"]), "—" if math.isnan(change) else f"{change:+.1%}", depths,
            _num(row.get(f"{SPEEDUP}_base", math.nan), 2), _num(row.get(f"{SPEEDUP}_run", math.nan), 2),
        )
    return table


def _findings_table(result: CheckResult) -> Table:
    from jetflow_bench.report.check import cell_label

    table = Table(title="findings")
    for column in ("level", "cell", "metric", "finding"):
        table.add_column(column)
    for f in result.findings:
        table.add_row(f"[{STYLE[f.level]}]{f.level}[/]", cell_label(f.cell), f.metric, f.message)
    return table


def _json(result: CheckResult) -> str:
    cells = json.loads(result.cells.to_json(orient="records"))
    findings = [{**dataclasses.asdict(f), "cell": None if f.cell is None else
                 {k: v.item() if hasattr(v, "item") else v for k, v in f.cell.items()}} for f in result.findings]
    return json.dumps({"passed": not result.failed, "baseline": str(result.baseline), "run": str(result.run),
                       "config_note": result.config_note,
                       "tau_tol": result.tau_tol, "numerics_tau_tol": result.numerics_tau_tol,
                       "speedup_warn": result.speedup_warn, "findings": findings,
                       "cells": cells})


def _one_run(argument: Path | None, option: Path | None) -> Path:
    """RUN as an argument (like `show RUN`) or as --run (older scripts); one of them, once."""
    if argument is not None and option is not None and argument != option:
        raise JfbenchError(f"check: RUN {argument} and --run {option}: give the run once")
    if argument is None and option is None:
        raise JfbenchError("check: which run? pass its folder, e.g. `jfbench check results/ci-run`")
    return argument or option


@app.command("check")
def check(
    run: Annotated[
        Path | None, typer.Argument(help="Run folder to check (or to promote with --update-baseline).")
    ] = None,
    run_option: Annotated[Path | None, typer.Option("--run", help="The same as the RUN argument.")] = None,
    baseline: Annotated[Path, typer.Option("--baseline", help="Reference run folder.")] = DEFAULT_BASELINE,
    tau_tol: Annotated[
        float, typer.Option("--tau-tol", min=0.0, help="Fail when τ drops by more than this fraction, or a_1..a_3 "
                                                        "by more than this many share points.")
    ] = 0.05,
    numerics_tau_tol: Annotated[
        float, typer.Option("--numerics-tau-tol", min=0.0, help=(
            "When the run ran other CPU numerics than the baseline (its manifest's cpu_numerics: another CPU "
            "vendor or vector ISA), fail only when τ drops by more than this fraction; a_1..a_3 drops then "
            "only warn. The same seeds train other weights there."))
    ] = 0.15,
    speedup_warn: Annotated[
        float, typer.Option("--speedup-warn", min=0.0, help="Warn (never fail) when the decode speed-up drops by "
                                                            "more than this fraction.")
    ] = 0.2,
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="Also write a Markdown summary here (e.g. the CI job summary).")
    ] = None,
    update: Annotated[
        bool, typer.Option("--update-baseline", help="Copy the run's summary and manifest into --baseline instead "
                                                     "of checking (a deliberate new reference).")
    ] = False,
    fmt: TableFormatOpt = TableFormat.table,
) -> None:
    """Compare a run with the reference cell by cell. Exit 1 when τ or a_1..a_3 regress beyond the
    tolerance, on any unexcused lossless divergence, or when baseline cells are missing; speed-up
    drops only warn (machines are noisy). Exit 0 otherwise.

    Examples:

        jfbench check results/ci-run --markdown "$GITHUB_STEP_SUMMARY"

        jfbench check results/ci-run --baseline results/baselines/ci --tau-tol 0.02

        jfbench check --update-baseline results/ci-run

    A run made with another config than the baseline's is compared all the same, and a line
    says so first; `python results/baselines/ci/reproduce.py` makes a comparable run. A run on
    another kind of CPU (another vendor or vector ISA) trains other weights from the same seeds:
    its τ is gated with --numerics-tau-tol and its a_1..a_3 only warn.
    """
    from jetflow_bench.report.check import MARK, check_run, update_baseline

    run = _one_run(run, run_option)

    if markdown is not None:
        writable_folder(markdown.parent, "--markdown")
    if update:
        writable_folder(baseline, "--baseline")
        for path in update_baseline(run, baseline):
            print(path)
        Console(stderr=True).print(f"baseline {baseline} now holds run {run}; commit it to make it the reference")
        return
    result = check_run(baseline, run, tau_tol, speedup_warn, numerics_tau_tol)
    if result.config_note:
        say(f"note: {result.config_note}")
    if markdown is not None:
        markdown.write_text(result.markdown(), encoding="utf-8")
    if fmt is TableFormat.json:
        print(_json(result))
    elif fmt is TableFormat.csv:
        emit(json.loads(_json(result))["cells"], fmt)
    elif fmt is TableFormat.markdown:
        print(result.markdown())
    else:
        console = Console()
        print_table(console, _cells_table(result))
        if result.findings:
            print_table(console, _findings_table(result))
        verdict = MARK["fail" if result.failed else "ok"]
        console.print(f"{verdict} {result.headline()}", style=STYLE["fail" if result.failed else "ok"])
    if result.failed:
        sys.exit(1)  # not typer.Exit: non-standalone click turns that into a return value

