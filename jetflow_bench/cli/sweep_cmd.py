"""`jfbench sweep`: run a grid of cells into a resumable run folder.

Wiring only: the shared grid options (`grid_options.grid_command`) around its own (arms, serving
load, vLLM), handed over to `jetflow_bench.sweep` (arms, the run).
"""

from __future__ import annotations

from typing import Annotated

import typer

from jetflow_bench.cli import app
from jetflow_bench.cli.grid_options import (
    GridFlags,
    OutOpt,
    grid_command,
    grid_config,
    grid_temperatures,
    run_and_report,
)
from jetflow_bench.cli.options import AllowOtherTargetOpt, TargetOpt
from jetflow_bench.cli.vllm_options import (
    PPOpt,
    TPOpt,
    VLLMArgsOpt,
    VLLMBinOpt,
    VLLMPortOpt,
    VLLMServersOpt,
    VLLMUrlOpt,
)
from jetflow_bench.core.arms import ARM_SYNTAX

VLLM_FLAGS = ("vllm_bin", "vllm_url", "vllm_port", "vllm_servers", "vllm_args", "tensor_parallel_size",
              "pipeline_parallel_size")


@app.command("sweep")
@grid_command(after={"top_k": ("load",), "engine": VLLM_FLAGS, "max_memory": ("allow_other_target",)})
def sweep(
    target: TargetOpt,
    out: OutOpt,
    drafters: Annotated[
        str,
        typer.Option("--drafters", help=f"Comma-separated drafter arms: {ARM_SYNTAX} (quote brackets in the shell)."),
    ] = "ngram",
    load: Annotated[str | None, typer.Option(
        "--load", help="Serving load levels, an axis: poisson:RATE,... (requests/s, Poisson arrivals; inf = all at "
        "once) and/or concurrency:N,... (closed loop, N in flight). The batch size is then the engine's capacity.",
    )] = None,
    vllm_bin: VLLMBinOpt = None,
    vllm_url: VLLMUrlOpt = None,
    vllm_port: VLLMPortOpt = None,
    vllm_servers: VLLMServersOpt = 1,
    vllm_args: VLLMArgsOpt = None,
    tensor_parallel_size: TPOpt = 1,
    pipeline_parallel_size: PPOpt = 1,
    allow_other_target: AllowOtherTargetOpt = False,
    *,
    grid: GridFlags,
) -> None:
    """Run a grid of drafters × suites × budgets × batch sizes × repeats into a run folder.

    --load adds a serving axis: each level serves the suite's prompts as requests arriving over
    time, continuously batched (requests join the running batch at step boundaries, up to the batch
    size), and records TTFT, TPOT, every ITL and E2E latency per request; `jfbench show RUN --table
    load` gives percentiles, goodput, speed-ups and the break-even load.

    Every batch size also runs the AR baseline on the same prompts, timed interleaved with the arms:
    prompt batch by prompt batch, the AR baseline, every arm and the AR baseline again (an A/A pair:
    the noise floor `show` prints), in an order rotated per repeat, each cell warmed up first. A
    speed-up divides only by the baseline timed beside it in the same session; --tau-only times no
    baseline and claims none. Every drafter request is checked token for token against the AR cell. Re-running the same command resumes an
    interrupted run without recomputing finished cells, and a cell it left half-done decodes only
    its missing prompt batches (kept in RUN/partial/); re-running it with only the grid changed
    (more budgets, another drafter, fewer repeats) keeps the finished cells still in the grid.

    --engine vllm adds vLLM's methods as arms: vllm:none (plain decoding), vllm:ngram, vllm:suffix,
    vllm:draft_model=PATH, vllm:eagle=PATH, vllm:eagle3=PATH, vllm:dflash=PATH (heads written by
    `jfbench export`), and any other method the installed vLLM lists. Budget B maps to num_speculative_tokens = B - 1 (a chain); vllm:none runs once per
    batch size, at B = 1.
    The AR baseline and jfbench drafters in the same list still run on jfbench's engine, and every
    vLLM output is compared with jfbench's AR output. Managed: a server per arm configuration on a
    free 127.0.0.1 port (log in OUT/vllm/); external: --vllm-url. Requests are the suite's token
    ids, greedy, with the suite's stop rule, batch size = concurrent requests. Verify steps come
    from each request's stream (one chunk per vLLM step), drafted tokens from vLLM's /metrics
    counters differenced per batch; vLLM arms' speed-ups divide by vllm:none. See docs/vllm.md.

    --engine sim --tau-only measures τ without the target's tree verification: the AR cell is decoded
    for real and every drafter cell is simulated from its outputs, the head run live at every step
    at its own budget (same τ and acceptance as the engine, step for step; nothing timed and no
    losslessness check, `diverged` reads "– sim"). For τ-only grids at large budgets on a slow device.

    Examples:

        jfbench sweep --target Qwen/Qwen3-8B --drafters ngram,eagle=heads/eagle,jetflow=heads/jf
            --suites gsm8k,math500 --budgets 16,64,256 --batch-sizes 1,4 --repeats 3 --out results/qwen8b

        jfbench sweep --target ~/.cache/jfbench/targets/micro-seed0-XXXX --drafters ngram
            --suites gsm8k --budgets 8,32 --limit 4 --max-new-tokens 32 --repeats 1 --out results/smoke

        jfbench sweep --target T --drafters jetflow=H/jf --budgets 16,64,256,auto --batch-sizes 1,8 --out results/auto

    Drafter options (the same NAME[KEY=VALUE,...] syntax as `jfbench ablate --drafter`): every
    option that differs from the drafter's default becomes part of the arm's name in the tables.
    Both JetFlow arms read one checkpoint:

        jfbench sweep --target T --drafters "jetflow=H/jf,jetflow-refine=H/jf,eagle[depth=8]=H/ea"
            --suites gsm8k --budgets 16,64,256 --out results/arms

        jfbench vllm setup && jfbench sweep --engine vllm --target T --drafters vllm:none,vllm:ngram,vllm:suffix
            --suites gsm8k --limit 8 --budgets 4,8 --repeats 1 --out results/vllm
    """
    from jetflow_bench.sweep.arms import sweep_arms
    from jetflow_bench.sweep.engines import ENGINES

    engine_name = ENGINES.canonical(grid.engine)
    options = None
    if engine_name == "vllm":
        from jetflow_bench.integrations.vllm_engine import VLLMOptions

        options = VLLMOptions.resolve(vllm_bin, vllm_url, vllm_port, vllm_args, tensor_parallel_size,
                                      pipeline_parallel_size, temperatures=grid_temperatures(grid), servers=vllm_servers)
    specs = sweep_arms(drafters, engine_name)
    run_and_report(grid_config(target, specs, grid, load=load), out, grid, engine_options=options,
                   allow_other_target=allow_other_target, allow_flag="--allow-other-target")
