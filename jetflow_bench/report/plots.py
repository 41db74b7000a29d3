"""The report's figures, drawn from a run's summary table (no model, no GPU needed).

Figures are built on `matplotlib.figure.Figure` directly, never through pyplot, so they need no
display or global backend (Agg renders them on save) and nothing leaks between figures. Every
drafter keeps its colour from `palette` in every figure. Repeats are averaged; speed-up bands are
the mean of the repeats' bootstrap 95% CI bounds.
"""

from __future__ import annotations

import base64
import io
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from jetflow_bench.core.arms import AR_ARM
from jetflow_bench.core.budget_policy import AUTO_COLUMN, budget_label
from jetflow_bench.core.calibration import expected_calibration_error, reliability_table
from jetflow_bench.report.loading import CELL_KEYS, SPEEDUP, Run, depth_columns
from jetflow_bench.report.palette import AR_COLOR, drafter_color, drafter_order

CPU_NOTE = (
    "On CPU, verification cost grows almost linearly with the budget (unlike a GPU, where verifying "
    "256 tokens costs little more than one), so CPU speed-ups peak at small budgets; τ (tokens per "
    "verify step) is the hardware-independent figure."
)
PANEL = (4.2, 3.2)  # inches per facet
STYLE = "whitegrid"
LINESTYLES = ("-", "--", ":", "-.")


@dataclass(frozen=True)
class ReportFigure:
    """A drawn figure with the file stem, title and caption the report and `jfbench plot` use."""

    name: str
    title: str
    caption: str
    figure: Figure

    def png_base64(self, dpi: int = 110) -> str:
        """The figure as a base64 PNG, for embedding in a self-contained HTML page."""
        buffer = io.BytesIO()
        self.figure.savefig(buffer, format="png", dpi=dpi)
        return base64.b64encode(buffer.getvalue()).decode("ascii")


@dataclass(frozen=True)
class Skipped:
    """A figure the run has columns for but nothing to show in: the report says why in one line."""

    name: str
    title: str
    reason: str


def _grid(rows: int, cols: int, note: str | None = None, sharey: bool | str = True) -> tuple[Figure, np.ndarray]:
    """A figure of rows × cols panels (axes array always 2-D); `note` is printed under the panels
    so the PNG carries its own caption when it travels without the report."""
    with sns.axes_style(STYLE):
        figure = Figure(figsize=(PANEL[0] * cols + 1.6, PANEL[1] * rows + (0.7 if note else 0)), layout="constrained")
        axes = figure.subplots(rows, cols, squeeze=False, sharey=sharey)
    if note:
        figure.get_layout_engine().set(rect=(0, 0.55 / figure.get_figheight(), 1, 1 - 0.55 / figure.get_figheight()))
        figure.text(0.01, 0.01, textwrap.fill(note, width=int(figure.get_figwidth() * 15)), fontsize=7.5,
                    ha="left", va="bottom", color="#444444")
    return figure, axes


def _budget_axis(ax: Axes, budgets: Iterable[int]) -> None:
    """Log-2 budget axis with a tick at every budget that was run."""
    ticks = sorted({int(b) for b in budgets})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(b) for b in ticks])
    ax.minorticks_off()
    ax.set_xlabel("budget B (tokens per verify)")


def _drafter_legend(figure: Figure, names: Iterable[str], extra: list[Line2D] | None = None) -> None:
    handles = [Line2D([], [], color=drafter_color(n), marker="o", label=n) for n in drafter_order(names)]
    figure.legend(handles=handles + (extra or []), loc="outside right upper", frameon=False)


def _mean_over_repeats(frame: pd.DataFrame, by: list[str], columns: list[str]) -> pd.DataFrame:
    return frame.groupby(by, as_index=False, dropna=False)[columns].mean()


def speedup_vs_budget(run: Run) -> ReportFigure | None:
    """Decode speed-up (micro, 95% CI band) against the budget: rows = batch size, cols = suite
    (prompt batches only: cells at a serving load are `speedup_vs_load`'s)."""
    cells = run.cells()
    cells = cells[cells["load"] == ""] if "load" in cells else cells
    if cells.empty or SPEEDUP not in cells:
        return None
    means = _mean_over_repeats(cells, ["suite", "batch_size", "drafter", "budget"],
                               [SPEEDUP, f"{SPEEDUP}_lo", f"{SPEEDUP}_hi"])
    data, auto = means[means["budget"] != AUTO_COLUMN], means[means["budget"] == AUTO_COLUMN]
    if data.empty:
        return None
    suites, sizes = sorted(data["suite"].unique()), sorted(data["batch_size"].unique())
    figure, axes = _grid(len(sizes), len(suites))
    for (i, size), (j, suite) in ((a, b) for a in enumerate(sizes) for b in enumerate(suites)):
        ax, panel = axes[i, j], data[(data["suite"] == suite) & (data["batch_size"] == size)]
        for drafter, line in panel.groupby("drafter"):
            line = line.sort_values("budget")
            color = drafter_color(drafter)
            ax.plot(line["budget"], line[SPEEDUP], marker="o", color=color, label=drafter)
            ax.fill_between(line["budget"], line[f"{SPEEDUP}_lo"], line[f"{SPEEDUP}_hi"], color=color, alpha=0.2, lw=0)
        for row in auto[(auto["suite"] == suite) & (auto["batch_size"] == size)].itertuples():
            ax.axhline(getattr(row, SPEEDUP), color=drafter_color(row.drafter), ls=":", lw=1.5)
        ax.axhline(1.0, color=AR_COLOR, ls="--", lw=1)
        _budget_axis(ax, data["budget"])
        ax.set_title(f"{suite} · batch {size}")
        ax.set_ylabel("decode speed-up ×")
    extra = [Line2D([], [], color=AR_COLOR, ls="--", label="AR = 1×")]
    if not auto.empty:
        extra.append(Line2D([], [], color="#333333", ls=":", label="--budgets auto"))
    _drafter_legend(figure, data["drafter"], extra)
    caption = ("Decode-only speed-up over the AR baseline on the same prompts (Σ baseline time / Σ method "
               "time), bands = bootstrap 95% CI over prompts."
               + (" Dotted: the drafter with the budget chosen per step (--budgets auto)." if not auto.empty else ""))
    return ReportFigure("speedup_vs_budget", "Speed-up vs budget", caption, figure)


def tau_vs_budget(run: Run) -> ReportFigure | None:
    """Acceptance length τ against the budget, one panel per suite (mean over batch sizes/repeats)."""
    cells = run.cells()
    cells = cells[cells["budget"] != AUTO_COLUMN]
    if cells.empty:
        return None
    data = cells.groupby(["suite", "drafter", "budget"], as_index=False)["tau"].agg(["mean", "min", "max"])
    suites = sorted(data["suite"].unique())
    figure, axes = _grid(1, len(suites))
    for ax, suite in zip(axes[0], suites, strict=True):
        for drafter, line in data[data["suite"] == suite].groupby("drafter"):
            line = line.sort_values("budget")
            ax.errorbar(line["budget"], line["mean"], yerr=[line["mean"] - line["min"], line["max"] - line["mean"]],
                        marker="o", capsize=3, color=drafter_color(drafter))
        ax.axhline(1.0, color=AR_COLOR, ls="--", lw=1)
        _budget_axis(ax, data["budget"])
        ax.set_title(suite)
        ax.set_ylabel("τ (tokens per verify step)")
    _drafter_legend(figure, data["drafter"], [Line2D([], [], color=AR_COLOR, ls="--", label="AR: τ = 1")])
    caption = ("Acceptance length τ = 1 + accepted drafted tokens per verify step (bonus token included); "
               "error bars span batch sizes and repeats. τ does not depend on the hardware.")
    return ReportFigure("tau_vs_budget", "τ vs budget", caption, figure)


def depth_acceptance(run: Run) -> ReportFigure | None:
    """Per-depth acceptance a_d (share of steps accepting ≥ d tokens): colour = drafter, dash = budget."""
    cells, columns = run.cells(), depth_columns(run.summary)
    if cells.empty or not columns:
        return None
    data = _mean_over_repeats(cells, ["suite", "drafter", "budget"], columns)
    reached = [c for c in columns if (data[c] >= 0.01).any()] or columns[:1]
    budgets = sorted(data["budget"].unique(), reverse=True)
    dashes = {b: LINESTYLES[k % len(LINESTYLES)] for k, b in enumerate(budgets)}
    depths = [int(c.split("_")[1]) for c in reached]
    suites = sorted(data["suite"].unique())
    figure, axes = _grid(1, len(suites))
    for ax, suite in zip(axes[0], suites, strict=True):
        for (drafter, budget), row in data[data["suite"] == suite].groupby(["drafter", "budget"]):
            ax.plot(depths, row[reached].iloc[0].to_numpy(), color=drafter_color(drafter), ls=dashes[budget], marker=".")
        ax.set(title=suite, xlabel="depth d", ylabel="a_d = P(accepted ≥ d)", ylim=(0, 1.02))
    _drafter_legend(figure, data["drafter"],
                    [Line2D([], [], color="#333333", ls=dashes[b], label=f"B = {b}") for b in budgets])
    caption = ("Per-depth acceptance a_d: the share of verify steps that accepted at least d drafted tokens "
               "(Σ_d a_d = τ − 1). Hardware-independent.")
    return ReportFigure("depth_acceptance", "Per-depth acceptance", caption, figure)


def time_breakdown(run: Run) -> ReportFigure | None:
    """Stacked draft / verify / other milliseconds per batched verify step, one panel per drafter,
    with the AR baseline's plain decode step as a dashed reference line."""
    keys = list(CELL_KEYS)
    rows = run.summary[run.summary["variant"] == "default"]
    rows = rows[rows["batch_size"] == rows["batch_size"].min()]
    parts = ("draft_s", "verify_s", "other_s")
    if rows.empty or not set(parts) <= set(rows):
        return None
    steps = rows.join(run.batch_steps, on=keys)["batch_steps"]
    per_step = rows[["drafter", "budget"]].assign(**{p: 1e3 * rows[p] / steps for p in parts}).dropna()
    data = per_step.groupby(["drafter", "budget"], as_index=False)[list(parts)].mean()
    ar_ms = data.loc[data["drafter"] == AR_ARM, list(parts)].sum(axis=1)
    drafters = [d for d in drafter_order(data["drafter"]) if d != AR_ARM]
    if not drafters:
        return None
    cols = min(len(drafters), 3)
    figure, axes = _grid(-(-len(drafters) // cols), cols)
    shades = {"draft_s": (1.0, None), "verify_s": (0.55, None), "other_s": (0.25, "//")}
    totals = data.loc[data["drafter"] != AR_ARM, list(parts)].sum(axis=1)
    cap = _axis_cap(totals.to_numpy(), float(ar_ms.iloc[0]) if len(ar_ms) else 0.0)
    clipped = False
    for ax, drafter in zip(axes.flat, drafters, strict=False):
        bars = data[data["drafter"] == drafter].sort_values("budget")
        labels, bottom = [str(b) for b in bars["budget"]], np.zeros(len(bars))
        for part, (alpha, hatch) in shades.items():  # the bars carry their legend: swatches = bar colours
            ax.bar(labels, bars[part], bottom=bottom, color=drafter_color(drafter), alpha=alpha, hatch=hatch,
                   edgecolor="white", label=part.removesuffix("_s"))
            bottom += bars[part].to_numpy()
        if len(ar_ms):
            ax.axhline(ar_ms.iloc[0], color=AR_COLOR, ls="--", lw=1, label="AR decode step")
        for x, total in zip(labels, bottom, strict=True):  # a bar past the shared axis: its value at the top
            if total > cap:
                ax.annotate(f"↑ {total:.0f} ms", (x, cap), ha="center", va="top", fontsize=8, fontweight="bold")
                clipped = True
        ax.set(title=drafter, xlabel="budget B", ylabel="ms per verify step")
        ax.legend(fontsize=7, loc="upper left", ncol=2, frameon=False, title="shades of this drafter's colour",
                  title_fontsize=7)
    axes.flat[0].set_ylim(0, cap)  # shared by every panel: one set_ylim per panel would keep only the last
    for ax in axes.flat[len(drafters):]:
        ax.set_visible(False)
    size = int(rows["batch_size"].min())
    caption = (f"Where a verify step's time goes at batch size {size} (mean over suites and repeats): "
               "drafting (solid), target verification (light), other bookkeeping (hatched), each in the "
               "drafter's colour; dashed = one plain AR decode step."
               + (" Bars marked ↑ reach past the shared axis: the label gives their height." if clipped else ""))
    return ReportFigure("time_breakdown", "Time per step", caption, figure)


def _axis_cap(totals: np.ndarray, reference: float) -> float:
    """The shared y-limit of the time panels: room for every bar, unless one dwarfs the rest (a
    15-pass EAGLE step beside one-pass heads), then 1.3x the next tallest, and the tall bars are
    labelled (`time_breakdown`) rather than shrinking every other bar to a sliver."""
    ordered = np.sort(totals)
    top = max(float(ordered[-1]), reference) if len(ordered) else reference
    runner_up = max(float(ordered[-2]) if len(ordered) > 1 else 0.0, reference)
    return 1.4 * top if top <= 2.5 * runner_up or runner_up == 0 else 1.6 * runner_up  # headroom: the legend


def throughput_vs_batch(run: Run) -> ReportFigure | Skipped | None:
    """Aggregate tokens/s against batch size at each drafter's best budget (labelled on the points)."""
    rows = run.summary[run.summary["variant"] == "default"]
    if rows.empty or "tokens_per_s" not in rows:
        return None
    if rows["batch_size"].nunique() < 2:
        return Skipped("throughput_vs_batch", "Throughput vs batch size",
                       f"the run has one batch size ({int(rows['batch_size'].iloc[0])}); --batch-sizes 1,4,... draws it")
    data = _mean_over_repeats(rows, ["suite", "drafter", "batch_size", "budget"], ["tokens_per_s"])
    best = data.loc[data.groupby(["suite", "drafter", "batch_size"])["tokens_per_s"].idxmax()]
    suites = sorted(best["suite"].unique())
    figure, axes = _grid(1, len(suites), sharey=False)
    for ax, suite in zip(axes[0], suites, strict=True):
        for drafter, line in best[best["suite"] == suite].groupby("drafter"):
            line = line.sort_values("batch_size")
            ax.plot(line["batch_size"], line["tokens_per_s"], marker="o", color=drafter_color(drafter),
                    ls="--" if drafter == AR_ARM else "-")
            if drafter != AR_ARM:
                for x, y, b in line[["batch_size", "tokens_per_s", "budget"]].itertuples(index=False):
                    ax.annotate(f"B={b}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7,
                                color=drafter_color(drafter))
        sizes = sorted(best["batch_size"].unique())
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.minorticks_off()
        ax.set(title=suite, xlabel="batch size", ylabel="tokens / s (all sequences)")
    _drafter_legend(figure, best["drafter"])
    caption = ("Aggregate throughput (new tokens / cell wall time) against batch size, each drafter at "
               "its best budget for that batch size (label); the best budget shrinks as load grows.")
    return ReportFigure("throughput_vs_batch", "Throughput vs batch size", caption, figure)


def speedup_vs_load(run: Run) -> ReportFigure | None:
    """TPOT speed-up (95% CI band) and throughput speed-up against the load level, per suite × load
    kind, one line per arm × budget, with plain decoding's A/A band at each level."""
    if "load" not in run.summary or not run.summary["load"].ne("").any():
        return None
    table = run.load_table()
    arms = table[table["drafter"] != AR_ARM] if table is not None else None
    if arms is None or arms["tpot_speedup"].isna().all():
        return None
    panels = sorted({(r.suite, r.load_kind) for r in arms.itertuples()})
    figure, axes = _grid(1, len(panels), sharey=False)
    for ax, (suite, kind) in zip(axes[0], panels, strict=True):
        panel = table[(table["suite"] == suite) & (table["load_kind"] == kind)]
        levels = sorted(panel["load_level"].unique())
        finite = [v for v in levels if np.isfinite(v)]
        at = {v: (v if np.isfinite(v) else 2 * max(finite, default=1.0)) for v in levels}  # "inf" drawn past the last rate
        noise = panel[panel["drafter"] == AR_ARM].dropna(subset=["noise_aa"]).sort_values("load_level")
        if not noise.empty:
            ax.fill_between(noise["load_level"].map(at), noise["noise_aa_lo"], noise["noise_aa_hi"], color=AR_COLOR,
                            alpha=0.25, lw=0)
        for n, ((drafter, budget), line) in enumerate(panel[panel["drafter"] != AR_ARM].groupby(["drafter", "budget"])):
            line, color = line.sort_values("load_level"), drafter_color(drafter)
            x, style = line["load_level"].map(at), LINESTYLES[n % len(LINESTYLES)]
            ax.plot(x, line["tpot_speedup"], marker="o", color=color, ls=style, label=f"{drafter} B={budget_label(budget)}")
            ax.fill_between(x, line["tpot_speedup_lo"], line["tpot_speedup_hi"], color=color, alpha=0.15, lw=0)
            ax.plot(x, line["tput_speedup"], marker="x", color=color, ls=style, lw=0.8, alpha=0.6)
        ax.axhline(1.0, color=AR_COLOR, ls="--", lw=1)
        ax.set_xscale("log")
        ax.set_xticks([at[v] for v in levels], [f"{v:g}" if np.isfinite(v) else "inf" for v in levels])
        ax.minorticks_off()
        unit = "requests / s (Poisson)" if kind == "poisson" else "requests in flight"
        ax.set(title=f"{suite} · {kind}", xlabel=unit, ylabel="speed-up × over plain decoding")
        ax.legend(fontsize=7)
    caption = ("Speed-up over plain decoding served at the same load in the same session: TPOT (o, band = "
               "bootstrap 95% CI over repeats and requests) and output throughput (x). Grey: plain "
               "decoding against its second copy (the A/A noise floor). Where the band reaches 1 or the "
               "grey band, speculation is no longer shown to pay (`jfbench show RUN --table load`).")
    return ReportFigure("speedup_vs_load", "Speed-up vs serving load", caption, figure)


def tau_vs_draft_passes(run: Run) -> ReportFigure | Skipped | None:
    """τ against sequential draft passes per step, one point per arm (every variant included), a
    line through each drafter's arms at one budget: the cost side of depth (EAGLE) and refinement
    (JetFlow). One panel per suite; needs the `draft_passes` column."""
    rows = run.summary[run.summary["drafter"] != AR_ARM]
    if rows.empty or "draft_passes" not in rows or rows["draft_passes"].isna().all():
        return None
    data = _mean_over_repeats(rows.dropna(subset=["draft_passes"]), ["suite", "drafter", "variant", "budget"],
                              ["draft_passes", "tau"])
    if data["draft_passes"].nunique() < 2:
        passes = float(data["draft_passes"].iloc[0])
        arms = ", ".join(sorted(data["drafter"].unique()))
        return Skipped("tau_vs_draft_passes", "τ vs draft passes",
                       f"every arm ({arms}) runs {passes:g} sequential draft passes per step, so there is no "
                       "cost axis to plot τ against")
    budgets = sorted(data["budget"].unique(), reverse=True)
    dashes = {b: LINESTYLES[k % len(LINESTYLES)] for k, b in enumerate(budgets)}
    suites = sorted(data["suite"].unique())
    figure, axes = _grid(1, len(suites), sharey=False)
    for ax, suite in zip(axes[0], suites, strict=True):
        for (drafter, budget), line in data[data["suite"] == suite].groupby(["drafter", "budget"]):
            line = line.sort_values("draft_passes")
            ax.plot(line["draft_passes"], line["tau"], marker="o", color=drafter_color(drafter), ls=dashes[budget])
            for x, y, variant in line[["draft_passes", "tau", "variant"]].itertuples(index=False):
                if variant != "default" and budget == budgets[0]:  # label each arm once, on the largest budget
                    ax.annotate(variant, (x, y), textcoords="offset points", xytext=(4, -8), fontsize=6,
                                color=drafter_color(drafter))
        ax.set(title=suite, xlabel="sequential draft passes per step", ylabel="τ (tokens per verify step)")
    _drafter_legend(figure, data["drafter"],
                    [Line2D([], [], color="#333333", ls=dashes[b], label=f"B = {b}") for b in budgets])
    caption = ("τ against the head forwards each drafting step runs one after another (mean per step): "
               "EAGLE pays one per drafted depth, JetFlow 1 + r (r refinement passes), DFlash-T one. "
               "Points are arms (labelled by their options); lines join a drafter's arms at one budget. "
               "Hardware-independent; on a GPU each pass costs roughly a fixed latency.")
    return ReportFigure("tau_vs_draft_passes", "τ vs draft passes", caption, figure)


def ablation_deltas(run: Run) -> ReportFigure | None:
    """Horizontal bars of each variant's τ and speed-up change vs the default, with CI whiskers:
    one row of panels per suite × batch size, one bar per budget in shades of the drafter's colour."""
    table = run.ablation
    metrics = [m for m in ("tau_delta", "speedup_delta") if table is not None and m in table]
    if table is None or table.empty or not metrics:
        return None
    table = table.assign(drafter=table.get("drafter", "jetflow"), batch_size=table.get("batch_size", 1))
    arms = sorted(set(zip(table["drafter"], table["variant"], strict=True)), reverse=True)
    labels = [variant if table["drafter"].nunique() == 1 else f"{drafter} · {variant}" for drafter, variant in arms]
    budgets = sorted(table["budget"].unique())
    shades = {d: sns.light_palette(drafter_color(d), len(budgets) + 1)[1:] for d in table["drafter"].unique()}
    panels = sorted(set(zip(table["suite"], table["batch_size"], strict=True)))
    figure, axes = _grid(len(panels), len(metrics), sharey=True)
    height = 0.8 / len(budgets)
    for (i, (suite, size)), (j, metric) in ((a, b) for a in enumerate(panels) for b in enumerate(metrics)):
        ax, rows = axes[i, j], table[(table["suite"] == suite) & (table["batch_size"] == size)]
        for k, budget in enumerate(budgets):
            bars = rows[rows["budget"] == budget].set_index(["drafter", "variant"]).reindex(arms)
            lo, hi = bars.get(f"{metric}_lo"), bars.get(f"{metric}_hi")
            xerr = None if lo is None or hi is None else [bars[metric] - lo, hi - bars[metric]]
            ax.barh(np.arange(len(arms)) + k * height, bars[metric], height=height, xerr=xerr, capsize=2,
                    color=[shades[d][k] for d, _ in arms])
        ax.axvline(0, color="#333333", lw=0.8)
        ax.set_yticks(np.arange(len(arms)) + height * (len(budgets) - 1) / 2, labels)
        ax.set(title=f"{suite} · batch {size}", xlabel="Δτ" if metric == "tau_delta" else "Δ speed-up ×")
    first = sorted(shades)[0]
    figure.legend(handles=[Patch(color=shades[first][k], label=f"B = {b}") for k, b in enumerate(budgets)],
                  loc="outside right upper", frameon=False)
    caption = ("Change of each ablation variant against the arm it is compared with (the default, or the "
               "base at the nearest common setting; see the table's compared_with) (negative = worse), "
               "whiskers = paired bootstrap 95% CI over prompts (and head seeds, with --seeds). Δτ is hardware-"
               "independent; Δ speed-up is measured on this run's device.")
    return ReportFigure("ablation_deltas", "Ablation deltas", caption, figure)


def projected_speedup(run: Run) -> ReportFigure | None:
    """`jfbench project`'s projected speed-up against the budget (solid, one line per drafter) beside
    the speed-up measured on the run's own device (dashed): rows = suite, cols = projected batch size."""
    path = run.path / "projection.parquet"
    if not path.is_file():
        return None
    data = pd.read_parquet(path)
    data = data[data["variant"] == "default"]
    if data.empty:
        return None
    hardware, target = data["hardware"].iloc[0], data["target"].iloc[0]
    suites, sizes = sorted(data["suite"].unique()), sorted(data["batch_size"].unique())
    note = (f"Projection on {hardware} for {target} from this run's τ and draft counters: a cost model, not a "
            "measurement (docs/projection.md). Dashed: the speed-up measured on this run's device.")
    figure, axes = _grid(len(suites), len(sizes), note, sharey=False)
    for (i, suite), (j, size) in ((a, b) for a in enumerate(suites) for b in enumerate(sizes)):
        ax, panel = axes[i, j], data[(data["suite"] == suite) & (data["batch_size"] == size)]
        for drafter, line in panel.groupby("drafter"):
            line = line.sort_values("budget")
            color = drafter_color(drafter)
            ax.plot(line["budget"], line["speedup"], marker="o", color=color)
            ax.plot(line["budget"], line["measured_speedup"], marker="x", ls="--", color=color, alpha=0.7)
        ax.axhline(1.0, color=AR_COLOR, ls=":", lw=1)
        _budget_axis(ax, data["budget"])
        ax.set_title(f"{suite} · batch {size}")
        ax.set_ylabel("speed-up ×")
    _drafter_legend(figure, data["drafter"], [
        Line2D([], [], color="#333333", marker="o", label=f"projected ({hardware})"),
        Line2D([], [], color="#333333", marker="x", ls="--", label="measured (this run)"),
    ])
    caption = (f"Projected on {hardware}: speed-up = τ · t_AR / (t_draft + t_verify + bookkeeping) with the roofline "
               f"terms of docs/projection.md, for {target}. " + note)
    return ReportFigure("projected_speedup", f"Projected on {hardware}", caption, figure)


def reliability_diagram(run: Run) -> ReportFigure | None:
    """Predicted (exp of the node's cumulative draft log-prob) vs observed acceptance per score bin,
    one panel per drafter (default variant; all suites, budgets, batch sizes and repeats pooled)."""
    if run.nodes is None:
        return None
    nodes = run.nodes[run.nodes["variant"] == "default"]
    if nodes.empty:
        return None
    drafters = drafter_order(nodes["drafter"].unique())
    figure, axes = _grid(1, len(drafters))
    for ax, drafter in zip(axes[0], drafters, strict=True):
        group = nodes[nodes["drafter"] == drafter]
        table = reliability_table(group["score"].to_numpy(), group["accepted"].to_numpy())
        ax.plot([0, 1], [0, 1], color=AR_COLOR, ls="--", lw=1)
        sizes = 20 + 180 * table["nodes"] / table["nodes"].max()
        ax.scatter(table["predicted"], table["observed"], s=sizes, color=drafter_color(drafter), zorder=3)
        ax.plot(table["predicted"], table["observed"], color=drafter_color(drafter), lw=1)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_title(f"{drafter} · ECE {expected_calibration_error(table):.3f} · {int(table['nodes'].sum())} nodes")
        ax.set_xlabel("predicted P(path accepted) = exp(score)")
        ax.set_ylabel("observed acceptance")
    caption = ("Reliability of the drafters' node scores: each point is a bin of drafted nodes by cumulative draft "
               "log-prob (marker area ∝ nodes), x = mean exp(score), y = share of them on the accepted path "
               "(raw verification). The dashed diagonal is perfect calibration; ECE = node-weighted mean "
               "|predicted − observed|. Nodes: the verified trees, at most 255 drafted nodes per tree and step.")
    return ReportFigure("reliability", "Calibrated acceptance (reliability)", caption, figure)


FIGURES: tuple[Callable[[Run], ReportFigure | Skipped | None], ...] = (
    speedup_vs_budget, speedup_vs_load, tau_vs_budget, tau_vs_draft_passes, depth_acceptance, time_breakdown,
    throughput_vs_batch,
    ablation_deltas, projected_speedup, reliability_diagram,
)


def make_figures(run: Run) -> list[ReportFigure]:
    """Every figure the run has data for (a run without an ablation table has no ablation figure)."""
    return figures_and_skips(run)[0]


def figures_and_skips(run: Run) -> tuple[list[ReportFigure], list[Skipped]]:
    """The figures drawn, and those with nothing to show (each with its one-line reason)."""
    built = [item for build in FIGURES if (item := build(run)) is not None]
    return ([f for f in built if isinstance(f, ReportFigure)], [f for f in built if isinstance(f, Skipped)])


def save_figures(figures: Iterable[ReportFigure], out_dir: Path, formats: Iterable[str] = ("png", "svg")) -> list[Path]:
    """Write each figure as `name.<format>` under `out_dir` (created); returns the written paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for fig in figures:
        for fmt in formats:
            path = out_dir / f"{fig.name}.{fmt}"
            fig.figure.savefig(path, format=fmt, dpi=150)
            written.append(path)
    return written
