"""`jfbench show RUN`: a run folder's summary as tables (rich, markdown) or rows (csv, json)."""

from __future__ import annotations

import json
import math
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from jetflow_bench.arms import arm_label
from jetflow_bench.cli import app
from jetflow_bench.cli.output import TableFormat, TableFormatOpt, markdown, print_table, rich_table
from jetflow_bench.errors import JfbenchError

if TYPE_CHECKING:  # pandas loads when a table is shown, not for `--help`
    import pandas as pd


class ShowTable(str, Enum):
    summary = "summary"
    ablation = "ablation"
    cells = "cells"


ARM_KEYS = ["suite", "drafter", "variant", "budget", "batch_size", "temperature"]
WIDE_DEPTHS = 4  # --wide: a_1 and the conditional p_2..p_4


def compact(summary: pd.DataFrame, wide: bool = False) -> pd.DataFrame:
    """One row per arm (repeats pooled): the figures a reader compares, formatted as text.

    Numbers are means over repeats; the decode speed-up's bracket is the mean of its per-repeat
    bootstrap 95% bounds and "sd" its standard deviation across repeats (blank for one repeat).
    ``wide`` adds where acceptance is won or lost: a_1, the conditional p_2..p_4 (p_d = a_d / a_{d-1})
    and the rank-1 faithfulness share (jetflow_bench.faithfulness).
    """
    import pandas as pd

    from jetflow_bench.budget_policy import budget_label
    from jetflow_bench.report.loading import SAMPLED_LOSSLESS

    rows = []
    for keys, g in summary.groupby(ARM_KEYS, sort=True, dropna=False):
        arm = dict(zip(ARM_KEYS, keys, strict=True))
        name = arm_label(arm["drafter"], arm["variant"])
        sd = g["speedup_decode_micro"].std() if len(g) > 1 else math.nan
        rows.append({
            "suite": arm["suite"], "arm": name, "B": budget_label(arm["budget"]), "bs": arm["batch_size"],
            "T": f"{arm['temperature']:g}", "n": len(g),
            "tau": _f(g["tau"].mean(), 2), "acc/step": _f(g["accepted_per_step"].mean(), 2),
            "raw acc/step": _f((g["accepted_raw"] / g["n_steps"]).mean(), 2),
            "tau/draft": _f(g["tau_per_draft"].mean(), 2), "alpha": _f(g["alpha"].mean(), 2),
            "passes": _f(g["draft_passes"].mean(), 1),
            "fill": _f(g["budget_fill"].mean(), 2), "tok/s": _f(g["tokens_per_s"].mean(), 1),
            "TPOT ms": _f(1e3 * g["tpot_s"].mean(), 2), "TTFT ms": _f(1e3 * g["ttft_s"].mean(), 1),
            "decode x [CI95]": f"{_f(g['speedup_decode_micro'].mean(), 2)} [{_f(g['speedup_decode_micro_lo'].mean(), 2)}"
                               f", {_f(g['speedup_decode_micro_hi'].mean(), 2)}]",
            "sd": _f(sd, 2), "e2e x": _f(g["speedup_e2e_micro"].mean(), 2),
            "acc": f"{_f(g['accuracy'].mean(), 2)}/{_f(g['baseline_accuracy'].mean(), 2)}",
            "diverged": SAMPLED_LOSSLESS if arm["temperature"] else
                        f"{int(g['lossless_unexcused'].sum())}+{int(g['lossless_excused'].sum())}",
            "other": _f(g["other_share"].mean(), 3),
            **({"ECE": _f(g["ece"].mean(), 3)} if "ece" in g else {}),
            **({"chosen B": g["chosen_budgets"].dropna().iloc[0] if g["chosen_budgets"].notna().any() else ""}
               if "chosen_budgets" in g else {}),
            **(_wide(g) if wide else {}),
        })
    return pd.DataFrame(rows)


def _wide(g: pd.DataFrame) -> dict[str, str]:
    """--wide's columns for one arm (blank where a run lacks them: shallow acceptance, older runs)."""
    columns = ["a_1", *(f"p_{d}" for d in range(2, WIDE_DEPTHS + 1))]
    cells = {c: _f(g[c].mean(), 2) if c in g else "" for c in columns}
    return {**cells, "rank1<=5nats": _f(g["rank1_faithful"].mean(), 2) if "rank1_faithful" in g else ""}


def compact_ablation(ablation: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame([{
        "arm": f"{r.drafter}[{r.variant}]", "vs": getattr(r, "compared_with", "default"),
        "suite": r.suite, "B": r.budget, "bs": r.batch_size,
        "T": f"{getattr(r, 'temperature', 0.0):g}", "n": r.n_prompts,
        "tau": _f(r.tau, 2), "d tau": f"{_f(r.tau_delta, 2, sign=True)} [{_f(r.tau_delta_lo, 2)}, {_f(r.tau_delta_hi, 2)}]",
        "decode x": _f(r.speedup_decode_micro, 2),
        "d x": f"{_f(r.speedup_delta, 2, sign=True)} [{_f(r.speedup_delta_lo, 2)}, {_f(r.speedup_delta_hi, 2)}]",
    } for r in ablation.itertuples()])


def _f(value: float, digits: int, sign: bool = False) -> str:
    import pandas as pd

    if value is None or pd.isna(value):
        return ""
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def _read(run: Path, name: str) -> pd.DataFrame:
    """``name``.parquet, else (damaged) its .csv twin with a warning; an error naming the file if neither."""
    path = run / f"{name}.parquet"
    if not path.exists():
        hint = "run `jfbench ablate`" if name == "ablation" else "no cell has finished yet"
        raise JfbenchError(f"{path} does not exist ({hint}): check the run folder")
    import pandas as pd

    from jetflow_bench.integrity import READ_ERRORS, reason, warn
    from jetflow_bench.report.loading import CELL_KEYS, REBUILD, with_cell_keys

    try:
        return with_cell_keys(pd.read_parquet(path))
    except READ_ERRORS as err:
        problem = f"{path} is unreadable ({reason(err)})"
    twin = path.with_suffix(".csv")
    try:
        frame = with_cell_keys(pd.read_csv(twin))
    except (*READ_ERRORS, FileNotFoundError):
        raise JfbenchError(f"{problem}, and {twin.name} cannot stand in for it: {REBUILD}") from None
    missing = [c for c in (*CELL_KEYS, "tau") if c not in frame.columns] if name == "summary" else []
    if missing:
        raise JfbenchError(f"{problem}, and {twin.name} lacks the columns {missing}: {REBUILD}")
    warn(f"{problem}; showing {twin.name} instead")
    return frame


def _caption(run: Path, manifest: dict) -> str:
    config = manifest.get("config", {})
    done = len(list((run / "cells").glob("*.json")))
    parts = [f"target {config.get('target')}", f"{manifest.get('device')}", f"config {manifest.get('config_hash')}",
             f"{done}/{manifest.get('n_cells', '?')} cells"]
    if config.get("device", "").startswith("cpu"):
        parts.append("CPU: verification cost grows with B, so tau is the hardware-independent figure")
    return "; ".join(parts)


@app.command("show")
def show(
    run: Annotated[Path, typer.Argument(help="A run folder written by `jfbench sweep` or `jfbench ablate`.")],
    format: TableFormatOpt = TableFormat.table,
    table: Annotated[ShowTable, typer.Option("--table", help="Which table csv/json print (all its columns).")] = ShowTable.summary,
    wide: Annotated[bool, typer.Option("--wide", help="Add a_1, conditional p_2..p_4 and rank-1 faithfulness.")] = False,
) -> None:
    """Print a run's summary (and ablation) as tables, or its rows as csv/json.

    table/markdown: one row per arm, repeats pooled — τ (emitted tokens per verify step), accepted
    drafts per step after and before the stop rule (acc/step, raw acc/step), τ per drafting step
    (vLLM's figure), α, sequential draft passes per step, budget fill, tokens/s, TPOT, TTFT,
    decode speed-up with CI and spread, e2e speed-up, accuracy vs AR, diverged (unexcused +
    excused requests), other (engine overhead share of step time). --wide adds a_1, the conditional
    acceptance p_d = a_d / a_(d-1) for d = 2..4, and rank1<=5nats (share of steps whose top-ranked
    draft branch is within 5 nats of the target's greedy choices along it). csv/json: every column of
    summary.parquet (or --table ablation / cells), one row per cell, for scripts.

    Examples:

        jfbench show results/qwen8b

        jfbench show results/qwen8b --format csv > summary.csv

        jfbench show results/ablate-head --format json --table ablation | jq '.[0]'
    """
    from jetflow_bench.sweep.store import MANIFEST, read_json

    manifest = read_json(run / MANIFEST)
    if manifest is None and not (run / MANIFEST).is_file():
        raise JfbenchError(f"{run} holds no jfbench run ({MANIFEST} missing): pass a folder written by `jfbench sweep`")
    from jetflow_bench.integrity import warn, warn_damaged_cells

    if manifest is None:
        warn(f"{run / MANIFEST} is not valid JSON; going on without the run's provenance")
        manifest = {}
    warn_damaged_cells(run / "cells")
    if format in (TableFormat.csv, TableFormat.json):
        frame = _read(run, table.value)
        if format == TableFormat.csv:
            frame.to_csv(sys.stdout, index=False)
        else:
            print(json.dumps(json.loads(frame.to_json(orient="records")), indent=1))
        return
    views = [("summary", compact(_read(run, "summary"), wide))]
    if (run / "ablation.parquet").exists():
        views.append(("ablation (variant - the arm in 'vs')", compact_ablation(_read(run, "ablation"))))
    if format == TableFormat.markdown:
        print("\n\n".join(f"**{title}**\n\n{markdown(_records(frame))}" for title, frame in views))
        return
    console = Console(highlight=False)
    for title, frame in views:
        caption = _caption(run, manifest) if title == "summary" else None
        print_table(console, rich_table(_records(frame), f"{run.name}: {title}", caption, left=("suite", "arm")))


def _records(frame: pd.DataFrame) -> list[dict]:
    return frame.to_dict("records")
