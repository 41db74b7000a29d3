"""`jfbench demo`: the whole pipeline on the embedded default, in a few minutes on a CPU.

toy target (trained or reused) -> draft heads trained briefly (cached) -> a small sweep with the
AR baseline, `ngram` and the learned drafters on GSM8K -> the summary table.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from jetflow_bench.cli import app
from jetflow_bench.cli.grid_options import GridFlags, grid_config, grid_temperatures, run_and_report
from jetflow_bench.cli.options import (
    AttentionOpt,
    DataDirOpt,
    DeviceOpt,
    DtypeOpt,
    SamplingSeedOpt,
    TemperatureOpt,
    TemperaturesOpt,
    ThreadsOpt,
    TopKOpt,
    TopPOpt,
)
from jetflow_bench.runtime import data_dir as resolve_data_dir
from jetflow_bench.runtime import set_threads

# A short head-training recipe: enough for drafts to be accepted, minutes not hours on 2 cores.
# The closing projection: these drafters' τ on the paper's setting (docs/projection.md).
DEMO_PROJECTION = {"hardware": "h100-sxm", "target": "qwen3-8b"}
DEMO_RECIPE = {"steps": 120, "prompts": 128, "max_new_tokens": 128, "seq_len": 192, "batch_size": 4, "anchors": 8}


@app.command("demo")
def demo(
    preset: Annotated[str, typer.Option(help="Toy target preset: micro (minutes) or tiny (~30 min to train).")] = "micro",
    limit: Annotated[int, typer.Option(min=1, help="GSM8K test prompts.")] = 8,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="New tokens per prompt.")] = 128,
    budgets: Annotated[str, typer.Option(help="Comma-separated budgets B (tree nodes incl. root).")] = "16,64",
    heads: Annotated[bool, typer.Option("--heads/--no-heads", help="Train (or reuse) eagle, dflash and jetflow heads.")] = True,
    head_steps: Annotated[int, typer.Option(min=1, help="Optimiser steps per head (cached by recipe).")] = DEMO_RECIPE["steps"],
    out: Annotated[Path, typer.Option(help="Run folder (re-running resumes it).")] = Path("results/demo"),
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    attention: AttentionOpt = "sdpa",
    data_dir: DataDirOpt = None,
    threads: ThreadsOpt = None,
    temperature: TemperatureOpt = 0.0,
    temperatures: TemperaturesOpt = None,
    top_p: TopPOpt = 1.0,
    top_k: TopKOpt = 0,
    seed: SamplingSeedOpt = 0,
) -> None:
    """Train or reuse the toy target and its draft heads, then sweep them on a few GSM8K prompts.

    Prints τ (tokens per verify step, bonus included) and the paired speed-up over the AR baseline for every drafter and budget. On a CPU, verification cost grows with the budget, so τ is the figure that carries over to GPUs; the last table sets each measured speed-up beside a projection of the same τ onto Qwen3-8B on an H100 (`jfbench project`, a model, not a measurement).

    Examples:

        jfbench demo

        jfbench demo --no-heads --budgets 16 --limit 4

        jfbench demo --preset tiny --budgets 16,64,256 --out results/demo-tiny

        jfbench demo --temperatures 0,1 --out results/demo-sampled
    """
    from jetflow_bench.engine.attention import get_attention
    from jetflow_bench.runtime import resolve_device
    from jetflow_bench.sweep.grid import DrafterSpec
    from jetflow_bench.toy import ensure_toy_target
    from jetflow_bench.training import ensure_head
    from jetflow_bench.training.objective import trainable_drafters

    grid = GridFlags(
        suites="gsm8k", budgets=budgets, batch_sizes="1", repeats=1, limit=limit, max_new_tokens=max_new_tokens,
        temperature=temperature, temperatures=temperatures, top_p=top_p, top_k=top_k, seed=seed,
        device=device, dtype=dtype, attention=attention, data_dir=data_dir, threads=threads,
    )
    grid_temperatures(grid)  # bad sampling flags fail before anything trains
    get_attention(attention, resolve_device(device))  # an unavailable backend fails before any training
    set_threads(threads)
    data = resolve_data_dir(data_dir)
    if not _has_prompts(data, out):
        _projected_column(out)
        return
    target = ensure_toy_target(preset, data)
    drafters = [DrafterSpec("ngram")]
    if heads:
        recipe = {**DEMO_RECIPE, "steps": head_steps}
        for name in trainable_drafters():  # every registered family with a training objective
            checkpoint = ensure_head(target, name, data_dir=data, device=device, dtype=dtype, threads=threads, **recipe)
            drafters.append(DrafterSpec(name, checkpoint=str(checkpoint)))
    grid = replace(grid, data_dir=data)
    run_and_report(grid_config(str(target), drafters, grid), out, grid, kind="demo")
    _projected_column(out)


def _has_prompts(data: Path | None, out: Path) -> bool:
    """Whether GSM8K's prompts can be read (data folder, else the hub). Without them, a finished demo
    in ``out`` is shown from its files with a note; with neither, the data error stops the demo
    before anything trains."""
    import sys

    from suites import get_suite
    from suites.sources import MissingData

    try:
        get_suite("gsm8k").load(data, limit=1)
        return True
    except MissingData as err:
        from jetflow_bench.sweep.store import MANIFEST, read_json

        manifest = read_json(out / MANIFEST) or {}
        if not manifest.get("finished") or not (out / "summary.parquet").exists():
            raise
        print(f"note: no GSM8K prompts here ({'; '.join(err.tried)}): showing the demo finished in {out} at "
              f"{manifest['finished']}; pass --data-dir DIR to run it again", file=sys.stderr)
    from jetflow_bench.cli.show_cmd import show

    show(out)
    return False


def _projected_column(out: Path) -> None:
    """What the measured τ would be worth for an 8B target on an H100 (a projection, labelled so)."""
    from rich.console import Console

    from jetflow_bench.projection.display import measured_vs_projected
    from jetflow_bench.projection.project import project_run, write_projection
    from jetflow_bench.projection.resolve import build_cost_model
    from jetflow_bench.report.loading import load_run

    run = load_run(out)
    model, hardware = build_cost_model(DEMO_PROJECTION["hardware"], DEMO_PROJECTION["target"], None, None, None)
    table, _ = project_run(run, model, [1], hardware=hardware)
    write_projection(table, out)
    Console().print(measured_vs_projected(table, hardware, batch=1))
