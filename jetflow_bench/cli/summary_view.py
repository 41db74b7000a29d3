"""The summary table people read: `jfbench show`, the demo and the end of a sweep print it.

One row per arm (repeats pooled). By default only the columns a reader compares first (suite,
arm, B, batch, τ, α, decode speed-up with its CI, diverged) so that the table fits a 100-column
terminal, as `vllm bench` and `lm_eval` print a short table first; `--wide` shows every column and
`--columns` picks some. `COLUMNS` is the one list of columns and their meanings: the legend, the
help of `jfbench show` and docs/methodology.md all describe these.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jetflow_bench.core.arms import ARM_KEYS
from jetflow_bench.core.errors import JfbenchError

if TYPE_CHECKING:  # pandas loads when a table is shown, not for `--help`
    import pandas as pd


@dataclass(frozen=True)
class Column:
    name: str  # what --columns takes
    header: str  # what the table prints
    meaning: str  # the legend's and the help's words
    value: Callable[[pd.DataFrame, dict], str]  # (the arm's summary rows, its keys) -> the cell text


def _f(value: float | None, digits: int, sign: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:+.{digits}f}" if sign else f"{value:.{digits}f}"


def _mean(column: str, digits: int, scale: float = 1.0) -> Callable[[pd.DataFrame, dict], str]:
    return lambda g, arm: _f(scale * g[column].mean(), digits) if column in g else ""


def _arm_name(g: pd.DataFrame, arm: dict) -> str:
    from jetflow_bench.core.arms import arm_label

    return arm_label(arm["drafter"], arm["variant"])


def _budget(g: pd.DataFrame, arm: dict) -> str:
    from jetflow_bench.core.budget_policy import budget_label

    return budget_label(arm["budget"])


def _speedup(g: pd.DataFrame, arm: dict) -> str:
    """The arm's pooled speed-up and CI (repeats and prompts resampled), `NOISE_MARK` when the CI
    overlaps the A/A noise floor; where the arm has no in-session baseline, a dash and why."""
    import pandas as pd

    from jetflow_bench.report.loading import NO_SPEEDUP

    notes = [n for n in g.get("speedup_note", []) if isinstance(n, str) and n]
    if notes:
        return f"– {dict(zip(NO_SPEEDUP.values(), UNPAIRED_MARKS, strict=True))[notes[0]]}"
    if "speedup_arm" not in g or g["speedup_arm"].isna().all():
        return ""
    row = g.iloc[0]
    distinct = row.get("speedup_distinct")
    mark = NOISE_MARK if distinct is not None and not pd.isna(distinct) and not distinct else ""
    return f"{_f(row['speedup_arm'], 2)} [{_f(row['speedup_arm_lo'], 2)}, {_f(row['speedup_arm_hi'], 2)}]{mark}"


def _spread(g: pd.DataFrame, arm: dict) -> str:
    return _f(g["speedup_decode_micro"].std(), 2) if len(g) > 1 else ""


def _diverged(g: pd.DataFrame, arm: dict) -> str:
    if arm["temperature"]:
        return SAMPLED
    if g["lossless_unexcused"].isna().all():
        return UNCHECKED
    return f"{int(g['lossless_unexcused'].sum())}+{int(g['lossless_excused'].sum())}"


def _chosen(g: pd.DataFrame, arm: dict) -> str:
    if "chosen_budgets" not in g or not g["chosen_budgets"].notna().any():
        return ""
    return str(g["chosen_budgets"].dropna().iloc[0])


SAMPLED = "sampled"  # `diverged` at T > 0, where exactness is distributional (the caption says so)
UNCHECKED = "– sim"  # `diverged` of a simulated cell (`--engine sim`): its outputs are the AR cell's by construction
NOISE_MARK = "~"  # a speed-up whose CI overlaps the A/A noise floor: not distinguishable from 1
UNPAIRED_MARKS = ("τ-only", "unpaired")  # in the decode column, for `report.loading.NO_SPEEDUP`'s reasons in order
COLUMNS: tuple[Column, ...] = (
    Column("suite", "suite", "benchmark suite", lambda g, arm: str(arm["suite"])),
    Column("arm", "arm", "drafter arm; options that differ from its defaults in brackets", _arm_name),
    Column("budget", "B", "draft budget: tokens the target verifies per sequence and step, root included "
           "(auto: chosen per step)", _budget),
    Column("batch", "batch", "sequences decoded together", lambda g, arm: str(arm["batch_size"])),
    Column("temperature", "T", "sampling temperature (0: greedy)", lambda g, arm: f"{arm['temperature']:g}"),
    Column("load", "load", "serving load level (--load; `show --table load` has its latencies)", lambda g, arm: str(arm["load"])),
    Column("repeats", "repeats", "timing repeats pooled into the row (each over every prompt)",
           lambda g, arm: str(len(g))),
    Column("prompts", "prompts", "requests per repeat", _mean("n_requests", 0)),
    Column("tau", "τ", "tokens emitted per verify step, bonus token included (AR: 1)", _mean("tau", 2)),
    Column("acc_step", "acc/step", "accepted drafted tokens per verify step (τ - 1)", _mean("accepted_per_step", 2)),
    Column("raw_acc_step", "raw acc/step", "the same before the stop rule cut the last step",
           lambda g, arm: _f((g["accepted_raw"] / g["n_steps"]).mean(), 2)),
    Column("tau_draft", "τ/draft", "τ over the steps that drafted something (vLLM's figure)", _mean("tau_per_draft", 2)),
    Column("alpha", "α", "accepted / drafted tokens", _mean("alpha", 2)),
    Column("passes", "passes", "sequential drafter forwards per step", _mean("draft_passes", 1)),
    Column("fill", "fill", "drafted tokens / (B - 1): how much of the budget the drafter used", _mean("budget_fill", 2)),
    Column("tok_s", "tok/s", "generated tokens per second of wall clock", _mean("tokens_per_s", 1)),
    Column("tpot", "TPOT ms", "time per output token after the first", _mean("tpot_s", 2, 1e3)),
    Column("ttft", "TTFT ms", "time to the first token (prefill)", _mean("ttft_s", 1, 1e3)),
    Column("decode", "decode × [95% CI]", "decode speed-up over AR timed beside it on the same prompts, repeats "
           f"pooled, 95% CI over prompts and repeats ({NOISE_MARK}: within the A/A noise floor)", _speedup),
    Column("sd", "sd", "standard deviation of that speed-up across repeats (blank: one repeat)", _spread),
    Column("e2e", "e2e ×", "end-to-end speed-up (prefill included)", _mean("speedup_e2e_micro", 2)),
    Column("accuracy", "acc arm/AR", "share of answers the suite's checker accepts, this arm / AR",
           lambda g, arm: f"{_f(g['accuracy'].mean(), 2)}/{_f(g['baseline_accuracy'].mean(), 2)}"),
    Column("diverged", "diverged", "requests whose output differs from AR: unexcused + excused (fp near-tie); "
           f"{UNCHECKED}: not checked, the cell was simulated from AR's outputs (--engine sim)",
           _diverged),
    Column("other", "other", "share of step time that is neither drafting nor verifying", _mean("other_share", 3)),
    Column("a_1", "a_1", "share of steps that accepted at least one drafted token", _mean("a_1", 2)),
    *(Column(f"p_{d}", f"p_{d}", f"conditional acceptance at depth {d}: a_{d} / a_{d - 1}", _mean(f"p_{d}", 2))
      for d in range(2, 5)),
    Column("depth", "depth", "mean depth of the drafted tree's deepest node over steps that drafted (1: first "
           "tokens only)", _mean("draft_depth", 2)),
    Column("rank1", "rank1<=5nats", "share of steps whose top-ranked draft branch is within 5 nats of the "
           "target's greedy choices along it", _mean("rank1_faithful", 2)),
    Column("ece", "ECE", "calibration error of the drafter's node scores as acceptance probabilities", _mean("ece", 3)),
    Column("chosen_budgets", "chosen B", "--budgets auto: share of steps at each chosen budget", _chosen),
)
BY_NAME = {c.name: c for c in COLUMNS}
COMPACT = ("suite", "arm", "budget", "batch", "tau", "alpha", "decode", "diverged")
LEGEND = "τ tokens/step · α accepted/drafted · decode × vs in-session AR [95% CI] · diverged unexcused+excused"


def pick_columns(wide: bool, columns: str | None) -> list[str] | None:
    """The names `--wide` / `--columns` ask for (None: the compact default); unknown names fail."""
    if wide and columns:
        raise JfbenchError("--wide and --columns: give one of them")
    if wide:
        return [c.name for c in COLUMNS]
    if columns is None:
        return None
    names = [n.strip() for n in columns.split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown or not names:
        raise JfbenchError(f"--columns {columns!r}: unknown column {unknown[0] if unknown else ''!r}; "
                           f"choose from {','.join(BY_NAME)}")
    return list(dict.fromkeys(["suite", "arm", *names]))


def summary_rows(summary: pd.DataFrame, names: Sequence[str] | None = None) -> list[dict[str, str]]:
    """One row per arm of ``summary`` (repeats pooled), headers as printed, values as text.

    ``names`` None: the compact columns, plus T when the run samples. Numbers are means over
    repeats, except the decode speed-up: the arm's pooled ratio with its hierarchical bootstrap
    95% CI over prompts and repeats (`metrics.pooled_speedups`).
    """
    if names is None:
        sampled = ["temperature"] if summary["temperature"].ne(0).any() else []
        loaded = ["load"] if summary["load"].ne("").any() else []
        names = [*COMPACT[:4], *sampled, *loaded, *COMPACT[4:]]
    chosen = [BY_NAME[n] for n in names]
    rows = []
    for keys, g in summary.groupby(ARM_KEYS, sort=True, dropna=False):
        arm = dict(zip(ARM_KEYS, keys, strict=True))
        rows.append({c.header: c.value(g, arm) for c in chosen})
    return rows


def column_help(width: int = 76) -> str:
    """Every column and its meaning, wrapped to ``width`` (for `jfbench show --help`)."""
    import textwrap

    pad = max(len(c.name) for c in COLUMNS) + 4
    lines = []
    for c in COLUMNS:
        text = f"{c.name:<{pad - 2}}  {f'({c.header}) ' if c.header != c.name else ''}{c.meaning}"
        lines += textwrap.wrap(text, width, initial_indent="  ", subsequent_indent=" " * (pad + 2))
    return "\n".join(lines)
