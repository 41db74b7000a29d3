"""`jfbench demo`: the whole pipeline on the embedded default, in under a minute on an idle CPU.

toy target (trained or reused) -> draft heads trained briefly (cached) -> a small sweep with the
AR baseline, `ngram` and the learned drafters on GSM8K -> a τ table. The quick demo (default) uses
the `nano` target and prints τ and acceptance only: one timing repeat on a CPU shared with other
work cannot tell a speed-up from noise, so it says which command measures them. `--full` is the
longer demo on `micro` with speed-ups and the projection onto an H100.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

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
from jetflow_bench.core.progress import say
from jetflow_bench.core.runtime import data_dir as resolve_data_dir
from jetflow_bench.core.runtime import set_threads

# The closing projection of the full demo: these drafters' τ on the paper's setting (docs/projection.md).
DEMO_PROJECTION = {"hardware": "h100-sxm", "target": "qwen3-8b"}
# A short head-training recipe: enough for drafts to be accepted, minutes not hours on 2 cores.
DEMO_RECIPE = {"steps": 120, "prompts": 128, "max_new_tokens": 128, "seq_len": 192, "batch_size": 4, "anchors": 8}
QUICK_COLUMNS = "tau,acc_step,alpha,a_1,budget,diverged"  # τ first; no timing column


@dataclass(frozen=True)
class DemoPlan:
    """What one kind of demo trains and decodes, and how long it takes on 2 CPU cores."""

    preset: str
    limit: int
    max_new_tokens: int
    budgets: str
    recipe: dict[str, Any]
    out: Path
    minutes: str  # how long it takes on 2 CPU cores, said before anything starts
    speedups: bool  # print measured speed-ups and the projection (the full demo)


QUICK = DemoPlan("nano", 4, 64, "16", {"steps": 60, "prompts": 48, "max_new_tokens": 64, "seq_len": 128,
                                       "batch_size": 4, "anchors": 8}, Path("results/demo"),
                 "under 1 min from an empty cache on an idle machine, 2-3 min on a busy one", False)
FULL = DemoPlan("micro", 8, 128, "16,64", DEMO_RECIPE, Path("results/demo-full"),
                "about 18 min from an empty cache, 4-8 min once cached", True)
WHY_NO_SPEEDUPS = ("speed-ups left out: one timing repeat on a shared CPU cannot tell them from noise; "
                   "`jfbench sweep --repeats 3` measures them with a noise floor (README, Commands)")


@app.command("demo")
def demo(
    full: Annotated[bool, typer.Option("--full", help="The longer demo (micro target, speed-ups, projection; ~18 min).")] = False,
    preset: Annotated[str | None, typer.Option(help="Toy target preset. Default: nano (quick), micro (--full).")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="GSM8K test prompts. Default: 4 (quick), 8 (--full).")] = None,
    max_new_tokens: Annotated[int | None, typer.Option(min=1, help="New tokens per prompt. Default: 64, 128 (--full).")] = None,
    budgets: Annotated[str | None, typer.Option(help="Budgets B (tree nodes incl. root). Default: 16; 16,64 (--full).")] = None,
    heads: Annotated[bool, typer.Option("--heads/--no-heads", help="Train (or reuse) eagle, dflash and jetflow heads.")] = True,
    head_steps: Annotated[int | None, typer.Option(min=1, help="Optimiser steps per head (cached by recipe).")] = None,
    out: Annotated[Path | None, typer.Option(help="Run folder (re-running resumes it). Default: results/demo, "
                                                  "results/demo-full (--full).")] = None,
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
    """Train or reuse a toy target and its draft heads, then decode a few GSM8K prompts with each.

    Prints τ (tokens per verify step, bonus included) and acceptance for every drafter: τ is the
    figure that carries over to other hardware. The quick demo leaves speed-ups out (one timing
    repeat on a CPU cannot separate them from noise); --full prints them with their CIs and sets
    each beside a projection of the same τ onto Qwen3-8B on an H100 (a model, not a measurement).

    Examples:

        jfbench demo

        jfbench demo --full

        jfbench demo --no-heads --limit 2

        jfbench demo --temperatures 0,1 --out results/demo-sampled
    """
    from jetflow_bench.core.runtime import resolve_device
    from jetflow_bench.engine.attention import get_attention
    from jetflow_bench.plugins import trainable_drafters
    from jetflow_bench.sweep.grid import DrafterSpec
    from jetflow_bench.toy import ensure_toy_target
    from jetflow_bench.training import ensure_head

    plan = FULL if full else QUICK
    out = out or plan.out
    grid = GridFlags(
        suites="gsm8k", budgets=budgets or plan.budgets, batch_sizes="1", repeats=1, limit=limit or plan.limit,
        max_new_tokens=max_new_tokens or plan.max_new_tokens, temperature=temperature, temperatures=temperatures,
        top_p=top_p, top_k=top_k, seed=seed, device=device, dtype=dtype, attention=attention, data_dir=data_dir,
        threads=threads, tau_only=not plan.speedups,  # the quick demo prints τ: it times no baseline beside the arms
    )
    grid_temperatures(grid)  # bad sampling flags fail before anything trains
    get_attention(attention, resolve_device(device))  # an unavailable backend fails before any training
    set_threads(threads)
    data = resolve_data_dir(data_dir)
    if not _has_prompts(data, out, plan):
        if plan.speedups:
            _projected_column(out)
        return
    say(f"{'full' if full else 'quick'} demo on 2 CPU cores: {plan.minutes}; results in {out}")
    target = ensure_toy_target(preset or plan.preset, data)
    drafters = [DrafterSpec("ngram")]
    if heads:
        recipe = {**plan.recipe, "steps": head_steps or plan.recipe["steps"]}
        for name in trainable_drafters():  # every registered family with a training objective
            checkpoint = ensure_head(target, name, data_dir=data, device=device, dtype=dtype, threads=threads, **recipe)
            drafters.append(DrafterSpec(name, checkpoint=str(checkpoint)))
    grid = replace(grid, data_dir=data)
    run_and_report(grid_config(str(target), drafters, grid), out, grid, kind="demo",
                   columns=None if plan.speedups else QUICK_COLUMNS)
    if plan.speedups:
        _projected_column(out)
    else:
        say(WHY_NO_SPEEDUPS)
    say(f"report: jfbench report {out}")


def _has_prompts(data: Path | None, out: Path, plan: DemoPlan) -> bool:
    """Whether GSM8K's prompts can be read (data folder, else the hub). Without them, a finished demo
    in ``out`` is shown from its files with a note; with neither, the data error stops the demo
    before anything trains."""

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

    show(out, columns=None if plan.speedups else QUICK_COLUMNS)
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
