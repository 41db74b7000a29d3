"""`jfbench curves`: trained heads' held-out curves, as a table and a figure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from jetflow_bench.cli import app
from jetflow_bench.cli.output import TableFormat, TableFormatOpt, emit
from jetflow_bench.core.errors import JfbenchError

PROXY_COLUMNS = ("last", "best", "heldout_accept_len", "heldout_top1")  # shown to 3 decimals


@app.command("curves")
def curves(
    heads: Annotated[list[Path], typer.Argument(help="Head folders written by `jfbench train`, or heads' .config.json "
                                                     "records (a published heads/ folder).")],
    plot: Annotated[Path | None, typer.Option("--plot", help="Also write the curves as a figure (.png or .svg).")] = None,
    every: Annotated[bool, typer.Option("--every", help="Every evaluation of every head, one row each, instead of "
                                                        "one row per head.")] = False,
    format: TableFormatOpt = TableFormat.table,
) -> None:
    """Each head's held-out acceptance proxy over its training (the curve `--stop-on-plateau` reads):
    where it stopped and why, its last and best value, and the first step at which the plateau
    test finds it flat (plateau_step; empty where it never does). Heads trained on two data sizes side by side
    show whether more data still helps. A head still in training shows its last checkpoint's curve
    (stop reason "in training").

    Examples:

        jfbench curves heads/smollm2/2400/dflash/seed-0 heads/smollm2/256/dflash/seed-0 --plot curves.png

        jfbench curves results/baselines/deep/claim1/heads/*.config.json --every --format csv
    """
    from jetflow_bench.report.curves import curves_figure, heldout_curves

    table, summary = heldout_curves(heads)
    if plot is not None:
        if plot.suffix not in (".png", ".svg"):
            raise JfbenchError(f"--plot {plot}: write a .png or .svg file")
        plot.parent.mkdir(parents=True, exist_ok=True)
        curves_figure(table).savefig(plot, dpi=150)
    shown = table if every else summary
    if format in (TableFormat.csv, TableFormat.json):
        emit(json.loads(shown.to_json(orient="records")), format)
        return
    rows = [{k: _cell(k, v) for k, v in r.items()} for r in shown.to_dict("records")]
    emit(rows, format, title="held-out accept length (proxy) of each head", left=("head",))


def _cell(column: str, value: object) -> str:
    if value is None or value != value:  # None, NaN
        return ""
    if isinstance(value, float):
        return f"{value:.3f}" if column in PROXY_COLUMNS else f"{value:g}"
    return str(value)
