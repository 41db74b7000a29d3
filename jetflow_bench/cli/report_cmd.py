"""`jfbench plot` and `jfbench report`: figures and a self-contained HTML report from run folders."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from jetflow_bench.cli import app
from jetflow_bench.cli.output import ObjectFormatOpt, TableFormat, object_format
from jetflow_bench.errors import JfbenchError, writable_folder

RunArg = Annotated[Path, typer.Argument(help="Run folder written by `jfbench sweep` or `jfbench ablate`.")]
FIGURE_FORMATS = ("png", "svg", "pdf")


@app.command("plot")
def plot(
    run: RunArg,
    out: Annotated[Path | None, typer.Option("--out", help="Folder for the figures. Default: RUN/plots.")] = None,
    formats: Annotated[str, typer.Option("--formats", help="Comma-separated: png, svg, pdf.")] = "png,svg",
    fmt: ObjectFormatOpt = TableFormat.table,
) -> None:
    """Draw the run's figures (speed-up and τ vs budget, per-depth acceptance, time per step,
    throughput vs batch size, ablation deltas) as image files.

    Examples:

        jfbench plot results/qwen8b --out reports/qwen8b-figures

        jfbench plot results/ablate-head --formats svg
    """
    chosen = [f.strip() for f in formats.split(",") if f.strip()]
    unknown = sorted(set(chosen) - set(FIGURE_FORMATS))
    if unknown or not chosen:
        raise JfbenchError(f"--formats {formats!r}: choose from {', '.join(FIGURE_FORMATS)} (comma-separated)")
    from jetflow_bench.report.loading import load_run
    from jetflow_bench.report.plots import CPU_NOTE, make_figures, save_figures

    loaded = load_run(run)
    folder = writable_folder(out or loaded.path / "plots", "--out")
    figures = make_figures(loaded)
    written = save_figures(figures, folder, chosen)
    if object_format(fmt) is TableFormat.json:
        print(json.dumps({"figures": [{"name": f.name, "title": f.title, "caption": f.caption} for f in figures],
                          "files": [str(p) for p in written]}))
        return
    for path in written:
        print(path)
    if "cpu" in loaded.device.lower() or not loaded.device:
        print(f"note: {CPU_NOTE}", file=sys.stderr)


@app.command("report")
def report(
    runs: Annotated[list[Path], typer.Argument(help="One or more run folders; runs 2+ are compared with run 1.")],
    out: Annotated[
        Path | None, typer.Option("--out", help="HTML file to write. Default: reports/<first run's name>.html.")
    ] = None,
    title: Annotated[str | None, typer.Option("--title", help="Page title. Default: the run names.")] = None,
) -> None:
    """Write one self-contained HTML report (figures embedded, no network needed to view it):
    headline speed-ups, figures, losslessness and accuracy, ablation, the full summary, manifests.

    Examples:

        jfbench report results/qwen8b --out reports/qwen8b.html

        jfbench report results/baselines/ci results/ci-run --out reports/ci-vs-baseline.html
    """
    from jetflow_bench.report.html import write_report

    out = out or Path("reports") / f"{runs[0].name}.html"
    writable_folder(out.parent, "--out")
    path = write_report(runs, out, title)
    Console(stderr=True).print(f"report written to {path}")
    print(path)
