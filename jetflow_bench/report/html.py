"""One self-contained HTML report for one or more runs (`jfbench report`).

Self-contained means the file is the whole report: figures are embedded as base64 PNG, styles and
the table-sorting script are inline, and nothing is fetched from the network, so a report can be
archived, mailed or opened on an air-gapped machine and still look the same.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import jinja2

from jetflow_bench import __version__
from jetflow_bench.report.loading import SAMPLED_LOSSLESS, Run, load_run
from jetflow_bench.report.plots import CPU_NOTE, ReportFigure, Skipped, ablation_deltas, figures_and_skips
from jetflow_bench.report.tables import (
    Table,
    delta_table,
    depth_table,
    divergent_cells,
    evidence_notes,
    frame_table,
    headline,
    manifest_items,
    quality_table,
    shape_table,
    summary_table,
)
from jetflow_bench.sweep.efficiency import efficiency_line
from jetflow_bench.sweep.engines import SIMULATED


@dataclass(frozen=True)
class Comparison:
    """A later run against the first one on matching cells."""

    table: Table
    only_base: int  # cells in the first run only
    only_run: int  # cells in this run only


@dataclass(frozen=True)
class RunSection:
    """Everything the template shows for one run."""

    run: Run
    headline: Table
    evidence: list[str]  # what the speed-ups rest on: repeats, sessions, noise floor, why some have none
    figures: list[tuple[ReportFigure, str]]  # (figure, base64 PNG); the ablation figure excluded
    skipped: list[Skipped]  # figures with nothing to show in this run, each with its reason
    summary: Table
    depth: Table  # a_1, conditional p_2..p_4, rank-1 faithfulness per drafting cell
    shape: Table  # drafted nodes per step at each tree depth, per arm (empty without node rows)
    quality: Table
    divergent: Table  # cells with unexcused divergences (empty table when none)
    divergences: Table | None  # the divergent requests with their positions, when requests.parquet has them
    n_unexcused: int
    n_excused: int
    sampled: bool  # some cells decode at temperature > 0 (losslessness there: SAMPLED_LOSSLESS)
    simulated: int  # cells of the sim engine, whose losslessness was not checked (`sweep.sim_engine`)
    ablation: Table | None
    ablation_figure: str | None  # base64 PNG
    manifest: list[tuple[str, str]]
    efficiency: str | None  # the engine's plain step against its roofline (`sweep.efficiency`); None: not measured
    comparison: Comparison | None  # against the first run; None for the first run


def _total(run: Run, column: str) -> int:
    return int(run.summary[column].fillna(0).sum()) if column in run.summary else 0


def _section(run: Run, first: Run | None) -> RunSection:
    figures, skipped = figures_and_skips(run)
    ablation_fig = next((f for f in figures if f.name == ablation_deltas.__name__), None)
    divergences = run.divergences()
    comparison = None
    if first is not None:
        comparison = Comparison(*delta_table(first, run))
    return RunSection(
        run=run,
        headline=headline(run),
        evidence=evidence_notes(run.summary),
        figures=[(f, f.png_base64()) for f in figures if f is not ablation_fig],
        skipped=skipped,
        summary=summary_table(run),
        depth=depth_table(run),
        shape=shape_table(run),
        quality=quality_table(run),
        divergent=frame_table(divergent_cells(run)),
        divergences=None if divergences is None or divergences.empty else frame_table(divergences.head(50)),
        n_unexcused=_total(run, "lossless_unexcused"),
        n_excused=_total(run, "lossless_excused"),
        sampled=bool((run.summary["temperature"] > 0).any()),
        simulated=int((run.summary["engine"] == SIMULATED).sum()) if "engine" in run.summary else 0,
        ablation=None if run.ablation is None else frame_table(run.ablation),
        ablation_figure=None if ablation_fig is None else ablation_fig.png_base64(),
        manifest=manifest_items(run),
        efficiency=efficiency_line(run.manifest.get("engine_efficiency")),
        comparison=comparison,
    )


def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("jetflow_bench", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        undefined=jinja2.StrictUndefined,  # a misspelt field fails the build, not the reader
        trim_blocks=True,
        lstrip_blocks=True,
    )


def methodology_url() -> str:
    """Link to the definitions every number follows: the checkout's docs/methodology.md when this
    package runs from one, else the path as the repository names it."""
    doc = Path(__file__).resolve().parents[2] / "docs" / "methodology.md"
    return doc.as_uri() if doc.is_file() else "docs/methodology.md"


def render_report(runs: Sequence[Run], title: str | None = None) -> str:
    """The report's HTML for `runs` (the first is the reference for deltas)."""
    if not runs:
        raise ValueError("render_report needs at least one run")
    sections = [_section(run, None if k == 0 else runs[0]) for k, run in enumerate(runs)]
    on_cpu = any("cpu" in run.device.lower() or not run.device for run in runs)
    return _environment().get_template("report.html.j2").render(
        title=title or "jfbench report: " + ", ".join(run.name for run in runs),
        generated=dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        sections=sections,
        cpu_note=CPU_NOTE,
        on_cpu=on_cpu,
        methodology_url=methodology_url(),
        sampled_lossless=SAMPLED_LOSSLESS,
        version=__version__,
    )


def write_report(run_paths: Sequence[str | Path], out: Path, title: str | None = None) -> Path:
    """Load the run folders, render the report and write it to `out` (parent folders created)."""
    html = render_report([load_run(path) for path in run_paths], title)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(html, encoding="utf-8")
    return out
