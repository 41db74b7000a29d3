"""Figures that have nothing to show are not drawn, and the report says why; legends match the bars.

The bugs: `throughput_vs_batch` for a one-batch-size run was two dots on an axis zoomed to
93.5–97; `tau_vs_draft_passes` for an ngram-only run had an x axis of −0.04..0.04 and legend
styles with no lines; `time_breakdown`'s legend swatches were grey while its bars were coloured
by drafter.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.colors import to_rgba

from jetflow_bench.report.html import render_report
from jetflow_bench.report.loading import load_run
from jetflow_bench.report.palette import drafter_color
from jetflow_bench.report.plots import figures_and_skips, time_breakdown
from tests.helpers.fixtures_runs import write_fixture_run


def _with_passes(run: Path, passes: dict[str, float]) -> Path:
    """Give the fixture run's summary the sequential-draft-passes column a sweep writes."""
    summary = pd.read_parquet(run / "summary.parquet")
    summary["draft_passes"] = summary["drafter"].map(passes).fillna(0.0)
    summary.to_parquet(run / "summary.parquet", index=False)
    (run / "summary.csv").unlink()
    return run


def test_one_batch_size_and_no_head_passes_skip_their_figures_with_a_reason(tmp_path: Path) -> None:
    run = _with_passes(write_fixture_run(tmp_path / "run", drafters=("ngram",), suites=("gsm8k",), batch_sizes=(1,)),
                       {"ngram": 0.0})
    figures, skipped = figures_and_skips(load_run(run))
    drawn = {f.name for f in figures}
    assert {"speedup_vs_budget", "tau_vs_budget", "time_breakdown"} <= drawn
    reasons = {s.name: s.reason for s in skipped}
    assert set(reasons) == {"throughput_vs_batch", "tau_vs_draft_passes"} and not drawn & set(reasons)
    assert "one batch size (1)" in reasons["throughput_vs_batch"]
    assert "ngram" in reasons["tau_vs_draft_passes"] and "0 sequential draft passes" in reasons["tau_vs_draft_passes"]
    html = render_report([load_run(run)])
    assert html.count('class="muted skipped"') == 2 and "one batch size (1)" in html


def test_figures_with_something_to_show_are_drawn(tmp_path: Path) -> None:
    run = _with_passes(write_fixture_run(tmp_path / "run", drafters=("ngram", "eagle"), suites=("gsm8k",)),
                       {"ngram": 0.0, "eagle": 12.0})
    figures, skipped = figures_and_skips(load_run(run))
    assert {"throughput_vs_batch", "tau_vs_draft_passes"} <= {f.name for f in figures} and not skipped


def test_time_breakdown_legend_swatches_are_the_bar_colours(tmp_path: Path) -> None:
    run = write_fixture_run(tmp_path / "run", drafters=("jetflow", "eagle"), suites=("gsm8k",), batch_sizes=(1,))
    figure = time_breakdown(load_run(run)).figure
    panels = [ax for ax in figure.axes if ax.get_visible() and ax.get_title()]
    assert {ax.get_title() for ax in panels} == {"jetflow", "eagle"}
    for ax in panels:
        legend = ax.get_legend()
        swatches = {text.get_text(): handle for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True)}
        bars = {container.get_label(): container.patches[0] for container in ax.containers}
        for part in ("draft", "verify", "other"):
            swatch = swatches[part]
            assert swatch.get_facecolor()[:3] == to_rgba(drafter_color(ax.get_title()))[:3], (ax.get_title(), part)
            assert bars[part].get_facecolor() == swatch.get_facecolor() and bars[part].get_hatch() == swatch.get_hatch()


def test_time_breakdown_marks_a_bar_past_the_shared_axis_and_clips_no_other(tmp_path: Path) -> None:
    # Bug: the panels share a y axis but each set its own limit, so the last panel's won: EAGLE's
    # 405 ms bar was cut at ~230 ms with no mark, and its panel's legend sat under the bars.
    run = load_run(write_fixture_run(tmp_path / "run", drafters=("jetflow", "eagle"), suites=("gsm8k",), batch_sizes=(1,)))
    tall = (run.summary["drafter"] == "eagle") & (run.summary["budget"] == run.summary["budget"].max())
    run.summary.loc[tall, "draft_s"] *= 50
    shown = time_breakdown(run)
    panels = {ax.get_title(): ax for ax in shown.figure.axes if ax.get_visible() and ax.get_title()}
    top = panels["jetflow"].get_ylim()[1]
    assert panels["eagle"].get_ylim()[1] == top
    heights = {t: [p.get_y() + p.get_height() for p in ax.patches] for t, ax in panels.items()}
    assert all(h <= top for h in heights["jetflow"])  # the other panel's bars all whole
    marks = [t.get_text() for t in panels["eagle"].texts]
    assert len(marks) == 1 and marks[0].startswith("↑ ") and marks[0].endswith(" ms")
    assert max(heights["eagle"]) > top and "marked ↑" in shown.caption
    assert panels["eagle"].get_legend().get_title().get_text() == "shades of this drafter's colour"
