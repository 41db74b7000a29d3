"""`jfbench project`: project a sweep's τ and draft counters onto a GPU (or this CPU, calibrated)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from jetflow_bench.cli import app
from jetflow_bench.cli.output import TableFormat, TableFormatOpt, emit, print_table
from jetflow_bench.core.errors import JfbenchError


def parse_sizes(spec: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError as err:
        raise JfbenchError(f"{flag} {spec!r} must be comma-separated integers, e.g. 1,8,32") from err
    if not values or min(values) < 1:
        raise JfbenchError(f"{flag} {spec!r} must list positive integers, e.g. 1,8,32")
    return sorted(set(values))


@app.command("project")
def project(
    run: Annotated[Path, typer.Argument(help="Run folder written by `jfbench sweep` (τ and draft counters are read from it).")],
    hardware: Annotated[
        str | None, typer.Option(help="h100-sxm (default), h200, b200, a100-80g, l40s, cpu-here (needs --calibration) or a TOML file.")
    ] = None,
    target_config: Annotated[
        str | None, typer.Option(help="Target to project onto: qwen3-8b, qwen3-30b-a3b, llama3-8b, a model folder or a cached hub id. Default: the run's own target.")
    ] = None,
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated batch sizes to project.")] = "1,8,32",
    dtype: Annotated[
        str | None, typer.Option(help="Weight and KV dtype: bfloat16 (default on GPUs), float16 or float32.")
    ] = None,
    calibration: Annotated[
        Path | None, typer.Option(help="File from `jfbench bench verify-cost`: measured verify times replace the roofline (implies --hardware cpu-here).")
    ] = None,
    context_tokens: Annotated[
        int | None, typer.Option(min=1, help="Tokens in the KV cache per sequence. Default: the run's mean prompt + half its new tokens.")
    ] = None,
    head_layers: Annotated[int | None, typer.Option(min=1, help="Decoder layers of every learned head (default: each head's config.json).")] = None,
    head_taps: Annotated[int | None, typer.Option(min=1, help="Target layers each head fuses (default: each head's config.json).")] = None,
    require_counters: Annotated[
        bool, typer.Option(help="Refuse runs without recorded draft counters instead of using the drafters' nominal ones.")
    ] = False,
    out: Annotated[Path | None, typer.Option(help="Folder for projection.parquet/csv. Default: RUN.")] = None,
    policy: Annotated[
        str | None, typer.Option(help="'auto': replay the per-step budget policy on the run's recorded trees "
                                 "(nodes.parquet) against the profile, beside every static budget.")
    ] = None,
    auto_budgets: Annotated[str, typer.Option(help="Candidate budgets of --policy auto.")] = "1,4,16,64,256",
    fmt: TableFormatOpt = TableFormat.table,
) -> None:
    """Project the run's measured τ and draft counters per drafter × budget onto a device.

    Writes projection.parquet and projection.csv (step times, tokens/s, speed-up over AR,
    η = speed-up / τ, the best budget per batch size) and prints a table and every assumption.
    It is a model, not a measurement: docs/projection.md lists each term with its source.

    Examples:

        jfbench project results/baselines/toy-quality-bar/main --hardware h100-sxm --target-config qwen3-8b

        jfbench project results/qwen8b --hardware b200 --batch-sizes 1,4,16,64

        jfbench bench verify-cost --target T --sizes 1,4,16,64 --out cal.json && jfbench project RUN --calibration cal.json

        jfbench project RUN --policy auto --hardware h100-sxm --target-config qwen3-8b --batch-sizes 1,8,32

    With --policy auto it writes projection_policy.parquet/csv instead: per drafter and batch size,
    the projected speed-up of the per-step budget policy and of every static candidate budget,
    replayed on the run's recorded trees (docs/budget-policy.md).
    """
    from jetflow_bench.projection.display import assumptions, projection_table
    from jetflow_bench.projection.project import project_run, run_context, warn, write_projection
    from jetflow_bench.projection.resolve import build_cost_model
    from jetflow_bench.report.loading import load_run
    from jetflow_bench.report.tables import evidence_notes

    loaded = load_run(run)
    sizes = parse_sizes(batch_sizes, "--batch-sizes")
    model, hw_name = build_cost_model(
        hardware, target_config or str((loaded.manifest.get("config") or {}).get("target", "")), dtype,
        calibration, context_tokens or run_context(loaded),
    )
    if policy is not None:
        _replay(loaded, model, sizes, policy, auto_budgets, head_layers, head_taps, hw_name, out, fmt)
        return
    table, notes = project_run(loaded, model, sizes, head_layers, head_taps, require_counters, hw_name)
    written = write_projection(table, out or loaded.path)
    warn(notes)
    lines = assumptions(model, table) + [line.replace("no speed-up", "no measured speed-up", 1)
                                          for line in evidence_notes(loaded.summary) if line.startswith("no speed-up")]
    _print(table, lambda: projection_table(table, hw_name), lines, written, fmt)


def _replay(loaded, model, sizes: list[int], policy: str, auto_budgets: str, head_layers: int | None,
            head_taps: int | None, hw_name: str, out: Path | None, fmt: TableFormat) -> None:
    """`--policy auto`: the offline policy replay (jetflow_bench.projection.policy_replay)."""
    from jetflow_bench.projection.display import assumptions, policy_table
    from jetflow_bench.projection.policy_replay import replay_run
    from jetflow_bench.projection.project import warn, write_projection

    if policy != "auto":
        raise JfbenchError(f"--policy {policy!r} is unknown: the one policy is 'auto'")
    candidates = parse_sizes(auto_budgets, "--auto-budgets")
    table, notes = replay_run(loaded, model, sizes, candidates, head_layers, head_taps, hw_name)
    written = write_projection(table, out or loaded.path, stem="projection_policy")
    warn(notes)
    static = ("τ, draft counters", "speed-up = ")  # these two lines describe the static projection
    lines = [line for line in assumptions(model, table) if not line.startswith(static)]
    lines.insert(-1, "replay: recorded sequence-steps of each drafter's largest static budget, grouped b at a time; "
                     "tokens = 1 + accepted nodes in the first B (counterfactual per step, stop rule ignored); "
                     "speed-up = (Σ tokens / Σ step_s) / (b / t_AR)")
    _print(table, lambda: policy_table(table, hw_name), lines, written, fmt)


def _print(table, rich_view, lines: list[str], written: list, fmt: TableFormat) -> None:
    """Rows on stdout (rich table, or csv/json/markdown for scripts with the assumptions and the
    written files on stderr), then the assumptions and the files."""
    if fmt is not TableFormat.table:
        emit(json.loads(table.to_json(orient="records")), fmt)
        for line in [*lines, *map(str, written)]:
            print(line, file=sys.stderr)
        return
    from rich.console import Console

    console = Console()
    print_table(console, rich_view())
    for line in lines:
        console.print(line, highlight=False)
    for path in written:
        print(path)
