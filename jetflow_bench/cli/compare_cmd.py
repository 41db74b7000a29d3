"""`jfbench compare`: one arm's τ in two sets of τ runs (two heads measured apart), paired per prompt."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from jetflow_bench.cli import app
from jetflow_bench.cli.output import TableFormat, TableFormatOpt, emit


@app.command("compare")
def compare(
    base: Annotated[list[Path], typer.Argument(help="Run folders of the reference head (one per head seed, named ...-sK).")],
    other: Annotated[list[Path], typer.Option("--other", help="Run folders of the head compared with it (repeatable), on "
                                                             "the same target, prompts and new tokens.")],
    arm: Annotated[str, typer.Option("--arm", help="The drafter arm both sides ran (its default variant).")] = "jetflow",
    format: TableFormatOpt = TableFormat.table,
) -> None:
    """τ of one arm in OTHER over BASE, minus 1, per suite and budget, with a 95% bootstrap CI over
    head seeds x prompts: for two heads of a drafter swept in separate τ-only runs (τ does not
    depend on the session; a speed-up does, and needs `jfbench ablate`). Runs pair by their
    ``-sK`` seed and request.

    Examples:

        jfbench compare new-s0-gsm8k new-s1-gsm8k --other old-s0-gsm8k --other old-s1-gsm8k
    """
    from jetflow_bench.report.compare import compare_tau

    table = compare_tau(base, other, arm)
    if format in (TableFormat.csv, TableFormat.json):
        emit(json.loads(table.to_json(orient="records")), format)
        return
    rows = [{"suite": r["suite"], "B": r["budget"], "arm": r["arm"], "τ base": f"{r['tau_base']:.3f}",
             "τ other": f"{r['tau_other']:.3f}", "other/base - 1 [95% CI]": f"{r['effect']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]",
             "seeds x prompts": f"{r['seeds']} x {r['prompts']}"} for r in table.to_dict("records")]
    emit(rows, format, title="tau, other head over base head", left=("suite", "arm"))
