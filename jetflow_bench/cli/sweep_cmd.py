"""`jfbench sweep` and `jfbench ablate`: run a grid of cells into a resumable run folder.

Wiring only: both commands list the shared grid options (`grid_options`) after their own, pack
them into `GridFlags`, and hand over to `jetflow_bench.sweep` (arms, the ablation plan, the run).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from jetflow_bench.arms import ARM_SYNTAX
from jetflow_bench.cli import app
from jetflow_bench.cli.grid_options import (
    GRID,
    AutoBudgetsOpt,
    BatchSizesOpt,
    BudgetsOpt,
    EngineOpt,
    ExecutorOpt,
    ForceOpt,
    GridFlags,
    LimitOpt,
    MaxMemoryOpt,
    MaxNewOpt,
    OutOpt,
    ProfileOpt,
    ProgressOpt,
    RayAddressOpt,
    RayCpusOpt,
    RayGpusOpt,
    RayRetriesOpt,
    RepeatsOpt,
    SampleSeedOpt,
    SeedOpt,
    StrictOpt,
    SuitesOpt,
    TauOnlyOpt,
    TieEpsOpt,
    grid_config,
    grid_temperatures,
    run_and_report,
)
from jetflow_bench.cli.options import (
    AllowOtherTargetOpt,
    AttentionOpt,
    CompileOpt,
    DataDirOpt,
    DeviceOpt,
    DtypeOpt,
    GraphsOpt,
    TargetOpt,
    TemperatureOpt,
    TemperaturesOpt,
    ThreadsOpt,
    TopKOpt,
    TopPOpt,
)
from jetflow_bench.cli.recipe_flags import EXTRA_FLAGS, epilog, family_flags, option_pairs
from jetflow_bench.cli.vllm_options import PPOpt, TPOpt, VLLMArgsOpt, VLLMBinOpt, VLLMPortOpt, VLLMUrlOpt


@app.command("sweep")
def sweep(
    ctx: typer.Context,
    target: TargetOpt,
    out: OutOpt,
    drafters: Annotated[
        str,
        typer.Option("--drafters", help=f"Comma-separated drafter arms: {ARM_SYNTAX} (quote brackets in the shell)."),
    ] = "ngram",
    suites: SuitesOpt = GRID.suites,
    budgets: BudgetsOpt = GRID.budgets,
    auto_budgets: AutoBudgetsOpt = GRID.auto_budgets,
    batch_sizes: BatchSizesOpt = GRID.batch_sizes,
    repeats: RepeatsOpt = GRID.repeats,
    tau_only: TauOnlyOpt = GRID.tau_only,
    limit: LimitOpt = GRID.limit,
    max_new_tokens: MaxNewOpt = GRID.max_new_tokens,
    temperature: TemperatureOpt = GRID.temperature,
    temperatures: TemperaturesOpt = GRID.temperatures,
    top_p: TopPOpt = GRID.top_p,
    top_k: TopKOpt = GRID.top_k,
    load: Annotated[str | None, typer.Option(
        "--load", help="Serving load levels, an axis: poisson:RATE,... (requests/s, Poisson arrivals; inf = all at "
        "once) and/or concurrency:N,... (closed loop, N in flight). The batch size is then the engine's capacity.",
    )] = None,
    device: DeviceOpt = GRID.device,
    dtype: DtypeOpt = GRID.dtype,
    attention: AttentionOpt = GRID.attention,
    compile: CompileOpt = GRID.compile,
    graphs: GraphsOpt = GRID.graphs,
    data_dir: DataDirOpt = GRID.data_dir,
    sample_seed: SampleSeedOpt = GRID.sample_seed,
    threads: ThreadsOpt = GRID.threads,
    seed: SeedOpt = GRID.seed,
    engine: EngineOpt = GRID.engine,
    vllm_bin: VLLMBinOpt = None,
    vllm_url: VLLMUrlOpt = None,
    vllm_port: VLLMPortOpt = None,
    vllm_args: VLLMArgsOpt = None,
    tensor_parallel_size: TPOpt = 1,
    pipeline_parallel_size: PPOpt = 1,
    tie_eps: TieEpsOpt = GRID.tie_eps,
    profile: ProfileOpt = GRID.profile,
    strict: StrictOpt = GRID.strict,
    force: ForceOpt = GRID.force,
    progress: ProgressOpt = GRID.progress,
    max_memory: MaxMemoryOpt = GRID.max_memory,
    allow_other_target: AllowOtherTargetOpt = False,
    executor: ExecutorOpt = GRID.executor,
    ray_address: RayAddressOpt = GRID.ray_address,
    ray_gpus_per_task: RayGpusOpt = GRID.ray_gpus_per_task,
    ray_cpus_per_task: RayCpusOpt = GRID.ray_cpus_per_task,
    ray_max_retries: RayRetriesOpt = GRID.ray_max_retries,
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

    grid = GridFlags.of(ctx.params)
    engine_name = ENGINES.canonical(engine)
    options = None
    if engine_name == "vllm":
        from jetflow_bench.integrations.vllm_engine import VLLMOptions

        options = VLLMOptions.resolve(vllm_bin, vllm_url, vllm_port, vllm_args, tensor_parallel_size,
                                      pipeline_parallel_size, temperatures=grid_temperatures(grid))
    specs = sweep_arms(drafters, engine_name)
    run_and_report(grid_config(target, specs, grid, load=load), out, grid, engine_options=options,
                   allow_other_target=allow_other_target, allow_flag="--allow-other-target")


@app.command("ablate", context_settings=EXTRA_FLAGS,
             epilog=epilog("variants of the base drafter's family: --NAME V1,V2; fixed: --train-option NAME=VALUE",
                           drafting="variants on the base's own head: --NAME V1,V2"))
def ablate(
    ctx: typer.Context,
    target: TargetOpt,
    out: OutOpt,
    drafter: Annotated[
        str, typer.Option("--drafter", help=f"The base arm (variant 'default'): {ARM_SYNTAX}.")
    ] = "jetflow",
    head: Annotated[
        str | None, typer.Option("--head", help="Head mask variants: bidirectional (alias: diffusion) or causal.")
    ] = None,
    loss: Annotated[str | None, typer.Option("--loss", help="Training-loss variants: rkl, sft.")] = None,
    data: Annotated[str | None, typer.Option("--data", help="Training-data variants: raw.")] = None,
    decay: Annotated[
        str | None, typer.Option("--decay", help="Loss-weighting variants (gamma; 0 = uniform), e.g. 0,3,15.")
    ] = None,
    option: Annotated[
        list[str] | None, typer.Option("--option", help="Any build option's values: KEY=V1,V2 (repeatable).")
    ] = None,
    checkpoint: Annotated[
        list[str] | None, typer.Option("--checkpoint", help="A variant's head: VARIANT=DIR (repeatable).")
    ] = None,
    train_option: Annotated[
        list[str] | None,
        typer.Option("--train-option", help="Recipe field for heads trained here, KEY=VALUE (e.g. steps=40)."),
    ] = None,
    seeds: Annotated[
        str | None,
        typer.Option("--seeds", help="Head seeds, e.g. 0,1,2: every arm again per seed (heads trained on demand); "
                     "deltas get a bootstrap CI over seeds x prompts and the table shows the seed spread. Each seed draws "
                     "its own training prompts; --train-option data_seed=N keeps one data set for every seed."),
    ] = None,
    suites: SuitesOpt = GRID.suites,
    budgets: BudgetsOpt = GRID.budgets,
    auto_budgets: AutoBudgetsOpt = GRID.auto_budgets,
    batch_sizes: BatchSizesOpt = GRID.batch_sizes,
    repeats: RepeatsOpt = GRID.repeats,
    tau_only: TauOnlyOpt = GRID.tau_only,
    limit: LimitOpt = GRID.limit,
    max_new_tokens: MaxNewOpt = GRID.max_new_tokens,
    temperature: TemperatureOpt = GRID.temperature,
    temperatures: TemperaturesOpt = GRID.temperatures,
    top_p: TopPOpt = GRID.top_p,
    top_k: TopKOpt = GRID.top_k,
    device: DeviceOpt = GRID.device,
    dtype: DtypeOpt = GRID.dtype,
    attention: AttentionOpt = GRID.attention,
    compile: CompileOpt = GRID.compile,
    graphs: GraphsOpt = GRID.graphs,
    data_dir: DataDirOpt = GRID.data_dir,
    sample_seed: SampleSeedOpt = GRID.sample_seed,
    threads: ThreadsOpt = GRID.threads,
    seed: SeedOpt = GRID.seed,
    engine: EngineOpt = GRID.engine,
    tie_eps: TieEpsOpt = GRID.tie_eps,
    profile: ProfileOpt = GRID.profile,
    strict: StrictOpt = GRID.strict,
    force: ForceOpt = GRID.force,
    progress: ProgressOpt = GRID.progress,
    max_memory: MaxMemoryOpt = GRID.max_memory,
    allow_other_target: AllowOtherTargetOpt = False,
    executor: ExecutorOpt = GRID.executor,
    ray_address: RayAddressOpt = GRID.ray_address,
    ray_gpus_per_task: RayGpusOpt = GRID.ray_gpus_per_task,
    ray_cpus_per_task: RayCpusOpt = GRID.ray_cpus_per_task,
    ray_max_retries: RayRetriesOpt = GRID.ray_max_retries,
) -> None:
    """Run a drafter's default configuration and named variants on one grid; write their deltas.

    ablation.parquet/csv: τ and speed-up deltas of each variant vs the default, with paired
    bootstrap 95% CIs over prompts.

    Variants that need other weights (--head, --loss, --data, --decay, the family options below) use --checkpoint VARIANT=DIR or are
    trained on demand, cached by recipe: the default head's own recipe (from its config.json, plus
    --train-option) changed only by the variant's setting. Drafting options (--refine-passes, --scoring,
    --construction: each drafter's are listed below) and --option run on the default's head.

    Examples:

        jfbench ablate --target T --drafter jetflow=heads/jf --head bidirectional --refine-passes 0,2
            --suites math500 --budgets 16,64,256 --out results/ablate-head

        jfbench ablate --target T --drafter ngram --option max_ngram=1,2 --suites gsm8k --out results/ng

        jfbench ablate --target T --drafter "eagle[top_k=4]=heads/eagle" --option depth=4,8 --out results/ea

        jfbench ablate --target T --drafter jetflow=heads/jf --loss rkl,sft --seeds 0,1,2 --out results/loss

        jfbench ablate --target T --drafter dflash=heads/df --decay 0,3,15 --out results/decay

    A variant changes exactly one factor. Where the base's setting is impossible for the variant
    (a bidirectional head on the packed layout or through tree-causal refinement), both run at the
    nearest common setting: the variant is compared with the base at that setting, and stderr,
    the manifest and the table (compared_with, held_fixed) say so.
    """
    from jetflow_bench.sweep.ablate_plan import plan_ablation

    grid = GridFlags.of(ctx.params)
    variant_flags = {"head": head, "loss": loss, "data": data, "decay": decay, **family_flags(ctx.args, drafting=True)}
    plan = plan_ablation(drafter, {k: v for k, v in variant_flags.items() if v is not None},
                         option_pairs(option, "--option"), option_pairs(train_option, "--train-option"), seeds)
    given = {k: Path(v).expanduser().resolve() for k, v in option_pairs(checkpoint, "--checkpoint").items()}
    config = grid_config(target, list(plan.specs), grid)
    plan = plan.pinned(config, given, allow_other_target)
    for note in plan.notes:
        print(note, file=sys.stderr)
    config = plan.with_heads(replace(config, extra=plan.extra), given, grid.data_dir)
    run_and_report(config, out, grid, kind="ablation", derived=plan.derived(config), heads_pinned=True)
