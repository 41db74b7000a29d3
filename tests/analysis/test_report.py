"""Figures and the HTML report from synthetic run folders: every section, embedded figures, valid
and self-contained HTML, the divergence banner, and multi-run deltas."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.report.html import methodology_url, render_report
from jetflow_bench.report.loading import load_run
from jetflow_bench.report.palette import AR_COLOR, drafter_color, palette
from jetflow_bench.report.plots import CPU_NOTE, make_figures, save_figures
from tests.helpers.fixtures_runs import write_fixture_run

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Structure(HTMLParser):
    """Collects ids, tags, URL attributes and checks that every non-void element is closed in order."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.ids: list[str] = []
        self.tags: list[str] = []
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        found = dict(attrs)
        if "id" in found:
            self.ids.append(str(found["id"]))
        self.urls += [str(found[a]) for a in ("src", "href") if a in found]
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.errors.append(f"unexpected </{tag}>")


def parse(html: str) -> Structure:
    parser = Structure()
    parser.feed(html)
    parser.close()
    return parser


@pytest.fixture(scope="module")
def ablation_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fixture_run(tmp_path_factory.mktemp("runs") / "ablate",
                             variants=("default", "head=bidirectional", "refine_passes=0"))


@pytest.fixture(scope="module")
def report_html(ablation_run: Path) -> str:
    return render_report([load_run(ablation_run)])


def test_palette_is_fixed_per_drafter_and_stable_for_unknown_names() -> None:
    assert drafter_color("ar") == AR_COLOR and drafter_color("JetFlow") == drafter_color("jetflow")
    assert drafter_color("my-drafter") == drafter_color("my-drafter") != AR_COLOR
    assert list(palette(["jetflow", "zeta", "ar", "eagle"])) == ["ar", "eagle", "jetflow", "zeta"]
    assert len({drafter_color(n) for n in ("ar", "ngram", "oracle", "eagle", "dflash", "jetflow")}) == 6
    # The families' records keep the colours every published figure used.
    assert [drafter_color(n) for n in ("jetflow", "dflash", "eagle", "ngram", "oracle", "eagle3")] == [
        "#d55e00", "#009e73", "#0072b2", "#cc79a7", "#e69f00", "#9467bd"]


@pytest.mark.parametrize("drafters", [("jetflow",), ("jetflow", "dflash", "eagle", "ngram")])
def test_plots_for_one_and_four_drafters(drafters: tuple[str, ...], tmp_path: Path) -> None:
    run = load_run(write_fixture_run(tmp_path / "run", drafters=drafters))
    figures = make_figures(run)
    assert [f.name for f in figures] == [
        "speedup_vs_budget", "tau_vs_budget", "depth_acceptance", "time_breakdown", "throughput_vs_batch",
    ]
    written = save_figures(figures, tmp_path / "plots")
    assert sorted(p.name for p in written) == sorted(f"{f.name}.{x}" for f in figures for x in ("png", "svg"))
    assert all(p.stat().st_size > 5000 for p in written)
    speedup = figures[0]
    assert CPU_NOTE not in speedup.caption  # the report says the CPU caveat once, not per figure
    # Every drafter is drawn in its palette colour (matplotlib writes colours as lower-case hex in SVG).
    svg = (tmp_path / "plots" / "speedup_vs_budget.svg").read_text()
    assert all(drafter_color(d) in svg for d in drafters)


def test_report_has_every_section_and_is_self_contained(report_html: str) -> None:
    page = parse(report_html)
    assert page.errors == [] and page.stack == []
    for section in ("status", "run-1", "headline-1", "depth-1", "quality-1", "ablation-1", "summary-1", "manifest-1"):
        assert section in page.ids, section
    assert "summary-table-1" in page.ids
    images = [u for u in page.urls if u.startswith("data:image/png;base64,")]
    assert len(images) == 6  # five run figures + the ablation figure
    # nothing fetched from the network; the one link out is the local methodology page
    assert all(u.startswith(("data:", "#")) or u == methodology_url() for u in page.urls)
    assert methodology_url().endswith("docs/methodology.md") and methodology_url() in page.urls
    assert not re.search(r"https?://", report_html)
    assert "link" not in page.tags and page.tags.count("script") == 1
    assert report_html.count(CPU_NOTE.replace("'", "&#39;")) == 1
    assert "banner pass" in report_html and "banner fail" not in report_html
    for key in ("command", "config_hash", "device", "git_commit", "versions"):
        assert f"<dt>{key}</dt>" in report_html


def test_depth_table_has_conditional_acceptance_and_faithfulness(ablation_run: Path, report_html: str) -> None:
    summary = pd.read_parquet(ablation_run / "summary.parquet")
    drafting = summary[summary["drafter"] != "ar"]
    section = report_html.split('id="depth-1"')[1].split("</table>")[0]
    assert section.count("<tr>") == len(drafting) + 1
    for column in ("a_1", "p_2", "p_4", "rank1_faithful"):
        assert f">{column}<" in section, column
    assert drafting["rank1_faithful"].between(0, 1).all() and drafting["rank1_faithful"].lt(1).any()


def test_report_summary_table_holds_every_cell(ablation_run: Path, report_html: str) -> None:
    table = report_html.split('id="summary-table-1"')[1].split("</table>")[0]
    assert table.count("<tr>") == len(pd.read_parquet(ablation_run / "summary.parquet")) + 1


def test_unexcused_divergence_raises_a_red_banner(tmp_path: Path) -> None:
    path = write_fixture_run(tmp_path / "bad", drafters=("jetflow",), budgets=(16,), batch_sizes=(1,))
    requests = pd.read_parquet(path / "requests.parquet")
    first = requests.index[requests["drafter"] == "jetflow"][0]
    requests.loc[first, ["lossless", "first_divergence"]] = [False, 7]
    requests.to_parquet(path / "requests.parquet", index=False)
    summary = pd.read_parquet(path / "summary.parquet")
    summary.loc[summary.index[summary["drafter"] == "jetflow"][0], "lossless_unexcused"] = 1
    summary.to_parquet(path / "summary.parquet", index=False)
    html = render_report([load_run(path)])
    assert html.count('class="banner fail"') == 2  # at the top and in the losslessness section
    assert "1 unexcused lossless divergence " in html
    divergences = html.split("Divergent requests")[1].split("</table>")[0]
    assert divergences.count("<tr>") == 2 and ">7</td>" in divergences


def test_two_runs_show_deltas_on_matching_cells(tmp_path: Path, cli) -> None:
    first = write_fixture_run(tmp_path / "a", drafters=("jetflow",), batch_sizes=(1,), seed=0)
    second = write_fixture_run(tmp_path / "b", drafters=("jetflow", "ngram"), batch_sizes=(1,), seed=1)
    out = tmp_path / "reports" / "ab.html"
    code, stdout, _ = cli("report", str(first), str(second), "--out", str(out))
    assert code == 0 and stdout.strip() == str(out)
    html = out.read_text()
    page = parse(html)
    assert page.errors == [] and {"run-1", "run-2", "deltas"} <= set(page.ids)
    assert "8 matching cells; 0 only in run 1, 6 only in this run" in html  # 2 suites × (AR + 3 budgets)
    assert "Δ tau %" in html


def test_plot_cli_writes_png_and_svg(tmp_path: Path, cli) -> None:
    run = write_fixture_run(tmp_path / "run", drafters=("jetflow",), batch_sizes=(1,), budgets=(16, 64))
    code, out, _ = cli("plot", str(run), "--out", str(tmp_path / "figs"), "--format", "json")
    assert code == 0
    files = json.loads(out)["files"]
    assert len(files) == 8 and all(Path(f).is_file() for f in files)  # 4 figures (one batch size: no batch plot)
    code, _, err = cli("plot", str(run), "--formats", "gif")
    assert code == 2 and "--formats 'gif'" in err


def test_not_a_run_folder_is_a_one_line_error(tmp_path: Path, cli) -> None:
    with pytest.raises(JfbenchError, match="does not exist"):
        load_run(tmp_path / "missing")
    code, out, err = cli("report", str(tmp_path), "--out", str(tmp_path / "r.html"))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "is not a run folder" in err and "jfbench sweep" in err


def test_cell_keys_match_the_sweep() -> None:
    from jetflow_bench.report.loading import CELL_KEYS
    from jetflow_bench.sweep.grid import CELL_KEYS as SWEEP_KEYS

    assert list(CELL_KEYS) == SWEEP_KEYS


def test_tau_vs_draft_passes_draws_every_arm(ablation_run: Path) -> None:
    from jetflow_bench.report.plots import tau_vs_draft_passes

    run = load_run(ablation_run)
    assert tau_vs_draft_passes(run) is None  # runs recorded before the draft-pass counter have no figure
    passes = {"default": 2.0, "head=bidirectional": 2.0, "refine_passes=0": 1.0}
    run.summary["draft_passes"] = [0.0 if d == "ar" else passes[v] for d, v in run.summary[["drafter", "variant"]].values]
    figure = tau_vs_draft_passes(run)
    assert figure is not None and figure.name in {f.name for f in make_figures(run)}
    arms = run.summary[run.summary["drafter"] != "ar"]
    for ax, suite in zip(figure.figure.axes, sorted(arms["suite"].unique()), strict=False):
        lines = arms[arms["suite"] == suite].groupby(["drafter", "budget"])
        assert len(ax.lines) == lines.ngroups  # one line per drafter and budget
        assert sum(len(line.get_xdata()) for line in ax.lines) == arms[arms["suite"] == suite][
            ["drafter", "variant", "budget"]].drop_duplicates().shape[0]  # one point per arm
