"""The issue's grid in two tables, read from the committed runs' summary.csv files.

    python results/baselines/smollm2/grid.py            # from results/baselines/smollm2

The grid's cells were measured over many sessions, in one run folder per suite and budget (and a
few beside them). This script gathers them so that no number is copied by hand:

- tau: tau per suite x arm at B = 16 / 64 / 256, all with the Commands' heads. B = 16 comes from the
  batch-4 cells, because the batch-1 B = 16 row used heads retrained on another CPU; batch changes
  tau only through rounding. The last column is the gain from B = 64 to 256.
- speedup: decode speed-up over plain decoding at batch 1 with its 95% CI, per budget. Cells whose
  head is not the Commands' one are marked with a dagger. Every cell was timed once (repeats 1),
  after its folder's plain cell, not interleaved with it, and with no A/A noise floor. A cell timed
  in another session than its folder's plain cell (read from the manifest's sessions) prints no
  ratio but "cross-session", and so does a cell whose plain cell is known to be off (UNSTABLE_PLAIN);
  one copied in from another folder without a record of where prints "pairing unknown".

A cell nobody has measured prints as a dash.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pandas as pd

SUITES = {"gsm8k": "GSM8K", "math500": "MATH-500", "humaneval": "HumanEval", "mt_bench": "MT-Bench"}
ARMS = ("ngram", "eagle", "jetflow-refine", "jetflow", "dflash")
BUDGETS = (16, 64, 256)
# Where each budget's cells live: (batch size, run folders under runs/, first match wins).
LARGE = {64: (1, ("grid64-{suite}",)), 256: (1, ("grid256-{suite}", "grid256-{suite}-learned"))}
TAU_SOURCES = {16: (4, ("grid-b4-{suite}",))} | LARGE
SPEEDUP_SOURCES = {16: (1, ("grid-{suite}", "grid-{suite}-eagle", "grid-{suite}-refine"))} | LARGE
# The batch-1 B = 16 row's first folders used the `heads/grid` retrain (another CPU, not bit-identical).
OTHER_HEADS = {"grid-gsm8k", "grid-math500", "grid-humaneval", "grid-mt_bench"}
# Plain cells timed in the same session as their arm but 35-63% slower than every sibling folder's
# plain cell for the suite (97 / 99 ms a token against 60-81 ms): a full test run shared the cores
# while they ran (README), so their ratios say nothing about the arm.
UNSTABLE_PLAIN = {"grid256-humaneval", "grid256-mt_bench"}


def timing_session(folder: Path) -> dict[str, int | None]:
    """drafter -> index of the session that timed it (None: unknown), from the manifest.

    A sweep runs its plan in order (plain first, then the drafters as listed) and records in each
    session how many cells were done before it, so a cell's position in the plan says which session
    timed it, if that session planned it there. Cells copied in from another folder count as done
    too: those the manifest names under adopted_cells, or that no covering session planned, were
    not timed beside this folder's plain cell. Every folder here holds one suite, budget and batch.
    """
    manifest = json.loads((folder / "manifest.json").read_text())
    plans = []
    for session in manifest["sessions"]:
        command = session["command"]
        plans.append(["ar"] + [entry.split("=")[0] for entry in command[command.index("--drafters") + 1].split(",")])
    starts = [session["cells_done_before"] for session in manifest["sessions"]]
    adopted = {cell_id.split("__")[1] for cell_id in manifest.get("adopted_cells", {})}
    found: dict[str, int | None] = {}
    for position, arm in enumerate(plans[-1]):
        k = max(k for k, start in enumerate(starts) if start <= position)
        planned = position < len(plans[k]) and plans[k][position] == arm
        found[arm] = k if planned and arm not in adopted else None
    return found


def load_cells(runs: Path, sources: dict[int, tuple[int, tuple[str, ...]]]) -> dict[tuple, tuple[pd.Series, str]]:
    """(suite, arm, budget) -> (summary row, folder) for the first folder in `sources` holding that cell."""
    cells: dict[tuple, tuple[pd.Series, str]] = {}
    for budget, (batch, patterns) in sources.items():
        for suite in SUITES:
            for pattern in patterns:
                folder = pattern.format(suite=suite)
                path = runs / folder / "summary.csv"
                if not path.exists():
                    continue
                frame = pd.read_csv(path)
                rows = frame[(frame.suite == suite) & (frame.budget == budget) & (frame.batch_size == batch)]
                for _, row in rows.iterrows():
                    cells.setdefault((suite, row.drafter, budget), (row, folder))
    return cells


def tau_table(runs: Path) -> str:
    cells = load_cells(runs, TAU_SOURCES)
    lines = ["| suite | arm | B = 16 (batch 4) | B = 64 | B = 256 | gain past 64 |", "| --- | --- | --- | --- | --- | --- |"]
    for suite, name in SUITES.items():
        for arm in ARMS:
            taus = [cells[(suite, arm, b)][0].tau if (suite, arm, b) in cells else math.nan for b in BUDGETS]
            shown = ["—" if math.isnan(t) else f"{t:.2f}" for t in taus]
            gain = "—" if math.isnan(taus[1] + taus[2]) else f"{taus[2] - taus[1]:+.2f}"
            lines.append(f"| {name} | {arm} | {' | '.join(shown)} | {gain} |")
    return "\n".join(lines)


def speedup_table(runs: Path) -> str:
    cells = load_cells(runs, SPEEDUP_SOURCES)
    lines = ["| suite | arm | B = 16 | B = 64 | B = 256 |", "| --- | --- | --- | --- | --- |"]
    for suite, name in SUITES.items():
        for arm in ARMS:
            shown = []
            for budget in BUDGETS:
                if (suite, arm, budget) not in cells:
                    shown.append("—")
                    continue
                row, folder = cells[(suite, arm, budget)]
                mark = " †" if folder in OTHER_HEADS and arm != "ngram" else ""
                session = timing_session(runs / folder)
                if folder in UNSTABLE_PLAIN or session[arm] is None or session[arm] != session["ar"]:
                    shown.append(("pairing unknown" if session[arm] is None else "cross-session") + mark)
                    continue
                low, high = row.speedup_decode_micro_lo, row.speedup_decode_micro_hi
                shown.append(f"{row.speedup_decode_micro:.2f}× [{low:.2f}, {high:.2f}]{mark}")
            lines.append(f"| {name} | {arm} | {' | '.join(shown)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("table", nargs="?", choices=("tau", "speedup", "both"), default="both", help="which table to print")
    parser.add_argument("--runs", type=Path, default=Path(__file__).parent / "runs", help="the committed run folders")
    args = parser.parse_args()
    if args.table in ("tau", "both"):
        print(tau_table(args.runs), end="\n\n")
    if args.table in ("speedup", "both"):
        print(speedup_table(args.runs))


if __name__ == "__main__":
    main()
