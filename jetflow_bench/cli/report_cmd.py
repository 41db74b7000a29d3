"""`jfbench plot` and `jfbench report`: figures and a self-contained HTML report from run folders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from jetflow_bench.cli import app
from jetflow_bench.cli.output import TableFormat
from jetflow_bench.core.errors import JfbenchError, writable_folder
from jetflow_bench.core.progress import say

RunArg = Annotated[Path, typer.Argument(help="Run folder written by `jfbench sweep` or `jfbench ablate`.")]
FIGURE_FORMATS = ("png", "svg", "pdf")


@app.command("plot")
def plot(
    run: RunArg,
    out: Annotated[Path | None, typer.Option("--out", help="Folder for the figures. Default: RUN/plots.")] = None,
    formats: Annotated[str, typer.Option("--formats", help="Image formats, comma-separated: png, svg, pdf.")] = "png,svg",
    fmt: Annotated[str, typer.Option("--format", help="What stdout lists the files as: table or json.")] = "table",
) -> None:
    """Draw the run's figures (speed-up and τ vs budget, per-depth acceptance, time per step,
    throughput vs batch size, ablation deltas) as image files.

    Examples:

        jfbench plot results/qwen8b --out reports/qwen8b-figures

        jfbench plot results/ablate-head --formats svg
    """
    if fmt not in (TableFormat.table.value, TableFormat.json.value):
        hint = f"; image formats go in --formats, e.g. --formats {fmt}" if fmt in FIGURE_FORMATS else ""
        raise JfbenchError(f"--format {fmt}: choose table or json (the list of files written){hint}")
    chosen = [f.strip() for f in formats.split(",") if f.strip()]
    unknown = sorted(set(chosen) - set(FIGURE_FORMATS))
    if unknown or not chosen:
        raise JfbenchError(f"--formats {formats!r}: choose from {', '.join(FIGURE_FORMATS)} (comma-separated)")
    from jetflow_bench.report.loading import load_run
    from jetflow_bench.report.plots import CPU_NOTE, figures_and_skips, save_figures

    loaded = load_run(run)
    folder = writable_folder(out or loaded.path / "plots", "--out")
    figures, skipped = figures_and_skips(loaded)
    written = save_figures(figures, folder, chosen)
    for skip in skipped:
        say(f"note: not drawn: {skip.name}: {skip.reason}")
    if fmt == TableFormat.json.value:
        print(json.dumps({"figures": [{"name": f.name, "title": f.title, "caption": f.caption} for f in figures],
                          "files": [str(p) for p in written]}))
        return
    for path in written:
        print(path)
    if "cpu" in loaded.device.lower() or not loaded.device:
        say(f"note: {CPU_NOTE}")


def default_report_path(runs: list[Path]) -> Path:
    """Inside the first run's folder, where its figures (RUN/plots) are, whatever the working directory."""
    others = "-".join(run.resolve().name for run in runs[1:])
    return runs[0] / (f"report-vs-{others}.html" if others else "report.html")


@app.command("report")
def report(
    runs: Annotated[list[Path], typer.Argument(help="One or more run folders; runs 2+ are compared with run 1.")],
    out: Annotated[
        Path | None, typer.Option("--out", help="HTML file to write. Default: RUN/report.html, or "
                                  "RUN/report-vs-<other runs>.html when comparing.")
    ] = None,
    title: Annotated[str | None, typer.Option("--title", help="Page title. Default: the run names.")] = None,
) -> None:
    """Write one self-contained HTML report (figures embedded, no network needed to view it):
    headline speed-ups, figures, losslessness and accuracy, ablation, the full summary, manifests.

    Examples:

        jfbench report results/qwen8b

        jfbench report results/qwen8b --out reports/qwen8b.html

        jfbench report results/baselines/ci results/ci-run --out reports/ci-vs-baseline.html
    """
    from jetflow_bench.report.html import write_report

    out = out or default_report_path(runs)
    writable_folder(out.parent, "--out")
    path = write_report(runs, out, title)
    Console(stderr=True).print(f"report written to {path}")
    print(path)
