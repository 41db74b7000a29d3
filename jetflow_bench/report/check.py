"""CI regression check: compare a run against a committed reference run, cell by cell.

Gating follows docs/methodology.md ("The baseline is honest"): CI machines are noisy, so the gate fails only on device-independent
numbers and only warns on speed-ups.

- fail: τ drops by more than `tau_tol` relative to the baseline;
- fail: a per-depth acceptance a_1..a_3 drops by more than `tau_tol` absolute (a_d is a share, so
  the tolerance is in share points; a relative tolerance would flag noise on a tiny a_3);
- fail: any unexcused lossless divergence in the run (whether or not the baseline has the cell);
- fail: a baseline cell is missing from the run (the gate could no longer watch it), or no cell
  matches at all;
- warn: the decode speed-up drops by more than `speedup_warn` relative; the configs' hashes differ;
- other CPU numerics: when the two runs ran other CPU kernels (`cpu_numerics`: another vendor, or
  another vector ISA), the same seeds train other weights, so τ fails only past the wider
  `numerics_tau_tol` and smaller τ drops and a_1..a_3 drops only warn. Measured: the AMD-recorded
  reference, re-run on an Intel Xeon under the same pinned kernels with no code changed, moved τ by
  −3 % to +8 % and a_1 by as much as −0.13;
- info: a cell only the run has (not gated until the baseline is updated); τ rose beyond tolerance.

Entry point for CI scripts: `check_run(baseline_dir, run_dir)` → `CheckResult` (`.failed`,
`.markdown()`); the `jfbench check` command wraps it.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from jetflow_bench.core.arms import AR_ARM
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.runtime import numerics_difference
from jetflow_bench.report import DEFAULT_BASELINE
from jetflow_bench.report.loading import CELL_KEYS, SPEEDUP, Run, align, load_run, paired_only

GATED_DEPTHS = ("a_1", "a_2", "a_3")
Level = Literal["fail", "warn", "info"]
MARK = {"fail": "❌ FAIL", "warn": "⚠️ warn", "info": "ℹ️ info", "ok": "✅ ok"}


@dataclass(frozen=True)
class Finding:
    """One reason to fail, warn or inform, about one cell (or the whole run when `cell` is None)."""

    level: Level
    cell: dict[str, Any] | None
    metric: str
    message: str


@dataclass(frozen=True)
class CheckResult:
    """The outcome of `check_run`: findings plus a per-cell comparison table."""

    baseline: Path
    run: Path
    tau_tol: float
    speedup_warn: float
    cells: pd.DataFrame  # per cell: CELL_KEYS, tau/a_1..a_3/speed-up on both sides, status
    findings: list[Finding] = field(default_factory=list)
    config_note: str | None = None  # set when the two configs differ: what to read first
    numerics_tau_tol: float | None = None  # the τ tolerance in force when the CPU numerics differ

    @property
    def failed(self) -> bool:
        return any(f.level == "fail" for f in self.findings)

    def count(self, level: Level) -> int:
        return sum(f.level == level for f in self.findings)

    def headline(self) -> str:
        matched = int((self.cells["status"] != "missing").sum()) if len(self.cells) else 0
        verdict = "FAILED" if self.failed else "passed"
        tolerance = (f"τ tolerance {self.numerics_tau_tol:g} under other CPU numerics"
                     if self.numerics_tau_tol is not None else f"τ tolerance {self.tau_tol:g}")
        return (f"regression check {verdict}: {matched} cells compared, {self.count('fail')} failures, "
                f"{self.count('warn')} warnings ({tolerance}, speed-up warn band {self.speedup_warn:g})")

    def markdown(self) -> str:
        """A Markdown summary for a CI job page: verdict, findings, then the per-cell table."""
        lines = [f"## {'❌' if self.failed else '✅'} jfbench {self.headline()}", "",
                 f"baseline `{self.baseline}` · run `{self.run}`", ""]
        if self.config_note:
            lines += [f"**{self.config_note}**", ""]
        if self.findings:
            lines += _markdown_table(["level", "cell", "metric", "finding"], [
                [MARK[f.level], cell_label(f.cell), f.metric, f.message] for f in self.findings
            ]) + [""]
        columns = [c for c in self.cells.columns if c != "status"]
        rows = [[MARK.get(r["status"], r["status"]), *(_text(r[c]) for c in columns)] for _, r in self.cells.iterrows()]
        lines += ["<details><summary>every cell</summary>", ""]
        lines += _markdown_table(["status", *columns], rows) + ["", "</details>", ""]
        return "\n".join(lines)


def cell_label(cell: dict[str, Any] | None) -> str:
    """"gsm8k/jetflow/default B=64 bs=1 r0" — short enough for a table column."""
    if cell is None:
        return "(run)"
    return (f"{cell['suite']}/{cell['drafter']}/{cell['variant']} B={cell['budget']} "
            f"bs={cell['batch_size']} r{cell['repeat']}")


def _text(value: Any) -> str:
    if isinstance(value, float):
        return "—" if math.isnan(value) else f"{value:.3f}"
    return str(value)


def _markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    """GitHub-flavoured Markdown table lines; a literal pipe would end a cell, so it is escaped."""
    return ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *("| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |" for row in rows)]


def _drop(base: float, run: float, relative: bool) -> float:
    """How much `run` fell below `base` (positive = worse); NaN when either side is NaN."""
    if math.isnan(base) or math.isnan(run):
        return math.nan
    return (base - run) / base if relative and base else base - run


def _compare_cell(row: pd.Series, tau_tol: float, speedup_warn: float, numerics_tau_tol: float | None
                  ) -> list[Finding]:
    """Findings for one cell present on both sides (columns suffixed _base / _run). `numerics_tau_tol`
    is set when the runs ran other CPU numerics: τ then fails only past it, and a_d drops warn."""
    cell = {k: row[k] for k in CELL_KEYS}
    foreign = numerics_tau_tol is not None
    found: list[Finding] = []
    tau_base, tau_run = float(row["tau_base"]), float(row["tau_run"])
    tau_drop = _drop(tau_base, tau_run, relative=True)
    if math.isnan(tau_run) and not math.isnan(tau_base):
        found.append(Finding("fail", cell, "tau", f"τ missing in the run (baseline {tau_base:.3f})"))
    elif tau_drop > tau_tol:
        fails = not foreign or tau_drop > numerics_tau_tol
        tolerance = f"−{numerics_tau_tol:.0%} under other CPU numerics" if foreign else f"−{tau_tol:.0%}"
        found.append(Finding("fail" if fails else "warn", cell, "tau",
                             f"τ {tau_base:.3f} → {tau_run:.3f} ({-tau_drop:+.1%}, tolerance {tolerance})"))
    elif tau_drop < -tau_tol:
        found.append(Finding("info", cell, "tau", f"τ improved {tau_base:.3f} → {tau_run:.3f}: consider "
                                                  "--update-baseline"))
    for depth in GATED_DEPTHS:
        if f"{depth}_base" in row and f"{depth}_run" in row:
            base, run = float(row[f"{depth}_base"]), float(row[f"{depth}_run"])
            if _drop(base, run, relative=False) > tau_tol:
                found.append(Finding("warn" if foreign else "fail", cell, depth,
                                     f"{depth} {base:.3f} → {run:.3f} (tolerance −{tau_tol:g} absolute"
                                     f"{'; other CPU numerics: warn only' if foreign else ''})"))
    if row["drafter"] != AR_ARM and f"{SPEEDUP}_base" in row and f"{SPEEDUP}_run" in row:
        base, run = float(row[f"{SPEEDUP}_base"]), float(row[f"{SPEEDUP}_run"])
        drop = _drop(base, run, relative=True)
        if drop > speedup_warn:
            found.append(Finding("warn", cell, "speed-up", f"decode speed-up {base:.2f}× → {run:.2f}× "
                                                           f"({-drop:+.0%}, warn band −{speedup_warn:.0%}); "
                                                           "timings are machine-dependent"))
    return found


def _gated_columns(summary: pd.DataFrame) -> pd.DataFrame:
    """Cell keys, τ, a_1..a_3 and the speed-up. The summary has a_d columns only up to the longest
    accepted run, so an absent a_d means no step accepted d tokens: 0, not unknown."""
    depths = {d: summary.get(d, 0.0) for d in GATED_DEPTHS}
    extra = [SPEEDUP] if SPEEDUP in summary else []
    return summary[[*CELL_KEYS, "tau", *extra]].assign(**depths)


def compare(base: Run, run: Run, tau_tol: float = 0.05, speedup_warn: float = 0.2,
            numerics_tau_tol: float = 0.15) -> CheckResult:
    """Compare two loaded runs; see the module docstring for what fails and what warns."""
    if min(tau_tol, speedup_warn, numerics_tau_tol) < 0:
        raise JfbenchError(f"tolerances must be ≥ 0 (got --tau-tol {tau_tol}, --speedup-warn {speedup_warn}, "
                           f"--numerics-tau-tol {numerics_tau_tol})")
    joined = align(_gated_columns(base.summary), _gated_columns(run.summary))
    numerics_change = _numerics_change(base, run)
    foreign_tol = max(tau_tol, numerics_tau_tol) if numerics_change else None
    findings: list[Finding] = []
    status = []
    for _, row in joined.iterrows():
        cell = {k: row[k] for k in CELL_KEYS}
        if row["_merge"] == "left_only":
            found = [Finding("fail", cell, "cell", "in the baseline but missing from the run")]
        elif row["_merge"] == "right_only":
            found = [Finding("info", cell, "cell", "new in the run, not in the baseline (not gated)")]
        else:
            found = _compare_cell(row, tau_tol, speedup_warn, foreign_tol)
        findings += found
        levels = {f.level for f in found}
        status.append("missing" if row["_merge"] == "left_only" else "new" if row["_merge"] == "right_only"
                      else "fail" if "fail" in levels else "warn" if "warn" in levels else "ok")
    if "lossless_unexcused" in run.summary:
        for _, row in run.summary[run.summary["lossless_unexcused"].fillna(0) > 0].iterrows():
            n = int(row["lossless_unexcused"])
            findings.append(Finding("fail", {k: row[k] for k in CELL_KEYS}, "lossless",
                                    f"{n} unexcused lossless divergence{'s' * (n != 1)}: output differs from "
                                    "the AR baseline"))
    if not (joined["_merge"] == "both").any():
        findings.append(Finding("fail", None, "cell", "no cell of the run matches the baseline"))
    for side, which in ((base, "baseline"), (run, "run")):
        notes = paired_only(side.summary).loc[side.summary["drafter"] != AR_ARM, "speedup_note"]
        for note, count in notes[notes != ""].value_counts().items():
            findings.append(Finding("info", None, "speed-up", f"{count} drafter cell(s) of the {which} have no speed-up "
                                                           f"({note}): their speed-up is not compared"))
    hashes = base.manifest.get("config_hash"), run.manifest.get("config_hash")
    note = None
    if None not in hashes and hashes[0] != hashes[1]:
        findings.append(Finding("warn", None, "config_hash", f"configs differ ({hashes[0]} vs {hashes[1]}): "
                                                             "cells may not measure the same thing"))
        note = _config_note(base, hashes, numerics_change)
    if numerics_change:
        findings.append(Finding("warn", None, "cpu_numerics", (
            f"other CPU numerics than the baseline's ({numerics_change}): the same seeds train other weights, "
            f"so τ fails only past −{foreign_tol:.0%} and a_1..a_3 drops only warn; for the strict gate on this "
            f"kind of CPU, record a reference on one (`jfbench check --update-baseline --run RUN --baseline "
            f"{base.path}`)")))
    cells = joined.drop(columns="_merge").assign(status=status)
    order = {"fail": 0, "warn": 1, "info": 2}
    findings.sort(key=lambda f: order[f.level])
    return CheckResult(base.path, run.path, tau_tol, speedup_warn, cells, findings, note, foreign_tol)


def _numerics_change(base: Run, run: Run) -> str | None:
    """What differs between the two runs' CPU kernels, or None (`runtime.numerics_difference`)."""
    return numerics_difference(base.manifest.get("cpu_numerics"), run.manifest.get("cpu_numerics"))


def _config_note(base: Run, hashes: tuple[str, str], numerics_change: str | None) -> str:
    """Why every finding may be the config's doing, and how to make a run comparable with ``base``.
    Under other CPU numerics the usual cause is a target or head trained to other weights (the hash
    sees weights by content), which no command line can change."""
    if numerics_change:
        return (f"the run's config ({hashes[1]}) is not the baseline's ({hashes[0]}), and it ran under other CPU "
                f"numerics ({numerics_change}): a target or head trained here has other weights than the "
                "baseline's, so differences below may come from that, not a regression")
    script = base.path / "reproduce.py"
    how = (f"make the run with `python {script}` on an empty JFBENCH_CACHE (a target or head already cached, "
           "e.g. trained in-process by the tests under other kernels, is reused as it is)" if script.is_file()
           else "make the run with the baseline's own command (its manifest.json)")
    return (f"the run's config ({hashes[1]}) is not the baseline's ({hashes[0]}): differences below may come "
            f"from the config, not a regression; {how}")


def _load_baseline(baseline_dir: Path) -> Run:
    if not ((baseline_dir / "summary.parquet").is_file() or (baseline_dir / "summary.csv").is_file()):
        raise JfbenchError(
            f"no baseline at {str(baseline_dir)!r} (no summary.parquet): create it with "
            f"`jfbench check --update-baseline --run RUN --baseline {baseline_dir}`"
        )
    return load_run(baseline_dir)


def check_run(
    baseline_dir: str | Path,
    run_dir: str | Path,
    tau_tol: float = 0.05,
    speedup_warn: float = 0.2,
    numerics_tau_tol: float = 0.15,
) -> CheckResult:
    """Check the run folder `run_dir` against the reference in `baseline_dir`.

    For CI: `result = check_run("results/baselines/ci", "results/ci-run")`; fail the job when
    `result.failed`, and publish `result.markdown()` as the job summary. Raises JfbenchError when
    either folder is not a run (the message names the folder and the fix).
    """
    return compare(_load_baseline(Path(baseline_dir)), load_run(run_dir), tau_tol, speedup_warn, numerics_tau_tol)


def update_baseline(run_dir: str | Path, baseline_dir: str | Path = DEFAULT_BASELINE) -> list[Path]:
    """Make the run the new reference: copy its summary (Parquet + CSV) and manifest into
    `baseline_dir`, replacing what was there. Refuses a run with unexcused divergences, which
    would turn a correctness bug into the reference. Returns the written paths."""
    run, target = load_run(run_dir), Path(baseline_dir)
    unexcused = int(run.summary.get("lossless_unexcused", pd.Series(dtype=float)).fillna(0).sum())
    if unexcused:
        raise JfbenchError(
            f"run {str(run.path)!r} has {unexcused} unexcused lossless divergences: fix them before making "
            "it the baseline"
        )
    target.mkdir(parents=True, exist_ok=True)
    written = [target / "summary.parquet", target / "summary.csv"]
    run.summary.to_parquet(written[0], index=False)
    run.summary.to_csv(written[1], index=False)
    (target / "manifest.json").unlink(missing_ok=True)  # never leave the old run's manifest behind
    if (run.path / "manifest.json").is_file():
        written.append(Path(shutil.copyfile(run.path / "manifest.json", target / "manifest.json")))
    return written
