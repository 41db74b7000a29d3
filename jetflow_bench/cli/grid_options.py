"""The grid flags `sweep` and `ablate` share, declared once, and what they become.

Each flag is one field of `GridFlags`: its type, its Typer option (spelling, aliases, help) and its
default. `grid_command` builds both commands' options from those fields (Typer reads options from a
signature, so it writes the fields into the command's) and hands the command one `GridFlags`.
`grid_config` validates the flags (before any model loads) and resolves the `SweepConfig`;
`run_and_report` runs it and prints.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, get_type_hints

import typer

from jetflow_bench.cli.options import (
    AttentionOpt,
    CompileOpt,
    DataDirOpt,
    DeviceOpt,
    DtypeOpt,
    GraphsOpt,
    TemperatureOpt,
    TemperaturesOpt,
    ThreadsOpt,
    TopKOpt,
    TopPOpt,
)
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.runtime import resolve_device, resolve_dtype, set_threads
from jetflow_bench.targets import absolute_target
from suites import SUITES

if TYPE_CHECKING:  # the sweep machinery imports torch and pandas: commands import it when they run
    from jetflow_bench.integrations.vllm_engine import VLLMOptions
    from jetflow_bench.sweep.driver import GroupExecutor
    from jetflow_bench.sweep.grid import DrafterSpec, SweepConfig
    from jetflow_bench.sweep.store import Derived

OutOpt = Annotated[Path, typer.Option("--out", help="Run folder; an interrupted run resumes when re-run.")]


@dataclass(frozen=True)
class GridFlags:
    """The grid flags `sweep` and `ablate` share (and `demo` fills in itself), each declared once:
    its type, its Typer option (spelling, help) and its default. `grid_command` turns the fields into
    the commands' options, in this order."""

    suites: Annotated[str, typer.Option("--suites", help="Comma-separated suites, e.g. gsm8k,math500.")] = "gsm8k"
    budgets: Annotated[str, typer.Option(
        "--budgets", help="Comma-separated budgets B (tree nodes incl. root), 1 <= B <= 1024; "
                          "'auto' (alone or beside them) chooses B per step among --auto-budgets.")] = "16,64,256"
    auto_budgets: Annotated[str, typer.Option(
        "--auto-budgets", help="Candidate budgets of --budgets auto (the tree is drafted at the largest).")] = "1,4,16,64,256"
    batch_sizes: Annotated[str, typer.Option(
        "--batch-sizes", help="Comma-separated batch sizes; the AR baseline runs at each.")] = "1"
    repeats: Annotated[int, typer.Option(
        "--repeats", min=1,
        help="Timing repeats; each times the AR baseline and the arms interleaved (>= 3 for reported speed-ups).")] = 3
    tau_only: Annotated[bool, typer.Option(
        "--tau-only",
        help="Record τ and counters only: one repeat, no baseline timed beside the arms, no speed-up claimed.")] = False
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Prompts per suite. Default: all.")] = None
    max_new_tokens: Annotated[int | None, typer.Option(
        "--max-new-tokens", min=1, help="New tokens per prompt. Default: each suite's own.")] = None
    temperature: TemperatureOpt = 0.0
    temperatures: TemperaturesOpt = None
    top_p: TopPOpt = 1.0
    top_k: TopKOpt = 0
    device: DeviceOpt = None
    dtype: DtypeOpt = None
    attention: AttentionOpt = "sdpa"
    compile: CompileOpt = False  # --compile: Inductor (`engine.compiled`)
    graphs: GraphsOpt = False  # --graphs: CUDA graphs, no compiler
    data_dir: DataDirOpt = None
    sample_seed: Annotated[int | None, typer.Option(
        "--sample-seed", min=0, help="Sample --limit prompts at random with this seed. Default: first N.")] = None
    threads: ThreadsOpt = None
    seed: Annotated[int, typer.Option(
        "--seed", min=0,
        help="torch seed set before every cell; seeds the bootstrap and, with each request's id, its sampling stream.")] = 0
    engine: Annotated[str, typer.Option(
        "--engine", help="Decoding engine: hf (this package's), vllm (vllm:* arms; see `sweep --help`) or sim "
        "(with --tau-only: hf decodes the AR cell, drafter cells are simulated from its outputs without the "
        "target's tree verification; same τ and acceptance, no times, no losslessness check).")] = "hf"
    tie_eps: Annotated[float | None, typer.Option(
        "--tie-eps", min=0.0, help="Excuse a divergence when the top-2 logits differ by < this. "
                                   "Default: by dtype, 1e-4 (fp32), 0.125 (bf16), 1/64 (fp16).")] = None
    profile: Annotated[bool, typer.Option(
        "--profile", help="Time every step's draft / verify / other split on a GPU (a device sync at each phase "
                          "boundary; by default one sync per step and no split). Always timed on a CPU.")] = False
    strict: Annotated[bool, typer.Option(
        "--strict", help="Exit 1 (after writing results) on any unexcused divergence.")] = False
    force: Annotated[bool, typer.Option("--force", help="Discard results of another config in --out.")] = False
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="Progress display on stderr.")] = True
    max_memory: Annotated[str | None, typer.Option(
        "--max-memory", help="Memory the KV caches may take, e.g. 40GiB (checked before the run). "
                             "Default: what is free on the device once the target is loaded.")] = None
    executor: Annotated[str, typer.Option(
        "--executor", help="Where cells run: local (this process) or ray (each pairing group, a suite x batch size x "
                           "temperature with its AR baselines, as a Ray task; docs/ray.md).")] = "local"
    ray_address: Annotated[str, typer.Option(
        "--ray-address", help="--executor ray: auto (the cluster this node belongs to, or RAY_ADDRESS), local (a "
                              "cluster of this machine, started for the run) or HOST:PORT.")] = "auto"
    ray_gpus_per_task: Annotated[float | None, typer.Option(
        "--ray-gpus-per-task", min=0, help="GPUs a group's task asks for. Default: 1 on a CUDA device, else 0.")] = None
    ray_cpus_per_task: Annotated[float | None, typer.Option(
        "--ray-cpus-per-task", min=0,
        help="CPUs a group's task asks for. Default: 1 on a CUDA device, else --threads.")] = None
    ray_max_retries: Annotated[int, typer.Option(
        "--ray-max-retries", min=0, help="Times a group runs again when its worker dies (its cells start over).")] = 3


GRID = GridFlags()  # the defaults


def grid_command(after: Mapping[str, tuple[str, ...]] = MappingProxyType({})) -> Callable[[Callable], Callable]:
    """Give a command the grid flags: its signature, as Typer reads it, becomes the command's own
    parameters, then every `GridFlags` field as its declared option (``after``: a grid field -> the
    command's own parameters listed right after it, e.g. {"engine": ("vllm_bin",)}). The command
    itself takes ``grid: GridFlags`` in their place, packed from the parsed options."""

    def decorate(command: Callable) -> Callable:
        hints = get_type_hints(command, include_extras=True)
        grid_hints = get_type_hints(GridFlags, include_extras=True)
        own = {name: p.replace(annotation=hints[name]) for name, p in inspect.signature(command).parameters.items()
               if name != "grid"}
        placed = {name for names in after.values() for name in names}
        params = [p for name, p in own.items() if name not in placed]
        for f in fields(GridFlags):
            params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default,
                                            annotation=grid_hints[f.name]))
            params.extend(own[name] for name in after.get(f.name, ()))
        grid_names = [f.name for f in fields(GridFlags)]

        @functools.wraps(command)
        def run(**values: Any) -> Any:
            grid = GridFlags(**{name: values.pop(name) for name in grid_names})
            return command(**values, grid=grid)

        run.__signature__ = inspect.Signature([p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params],
                                              return_annotation=None)
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run

    return decorate


def grid_config(
    target: str, drafters: list[DrafterSpec], grid: GridFlags, extra: tuple = (), load: str | None = None,
) -> SweepConfig:
    """Validate every flag (before any model loads) and resolve the config; ``load``: `sweep --load`."""
    import torch

    from jetflow_bench.engine.attention import get_attention
    from jetflow_bench.sweep.arms import check_auto_budgets, check_compiled_budgets
    from jetflow_bench.sweep.engines import ENGINES, check_simulated
    from jetflow_bench.sweep.grid import DEFAULT_TIE_EPS, SweepConfig, parse_budgets, parse_ints, parse_names
    from jetflow_bench.sweep.load import check_load_grid, parse_loads

    temperatures = grid_temperatures(grid)
    if grid.tau_only and grid.repeats not in (1, GRID.repeats):
        raise JfbenchError(f"--tau-only runs one repeat (τ does not depend on timing): drop --repeats {grid.repeats}")
    grid_executor(grid)
    budgets = parse_budgets(grid.budgets, grid.auto_budgets)
    check_simulated(ENGINES.canonical(grid.engine), grid.tau_only, temperatures, load, any(b.policy for b in budgets))
    if any(b.policy for b in budgets):
        check_auto_budgets(drafters)
    sizes = parse_ints(grid.batch_sizes, "--batch-sizes")
    suites = tuple(dict.fromkeys(SUITES.canonical(n) for n in parse_names(grid.suites, "--suites")))
    dev = resolve_device(grid.device)
    engine = ENGINES.canonical(grid.engine)
    if grid.attention != "sdpa" and engine != "hf":
        raise JfbenchError(f"--attention {grid.attention} applies to the hf engine only: drop it for --engine {engine}")
    get_attention(grid.attention, dev)  # unknown or unavailable backends fail before any model loads
    from jetflow_bench.engine.compiled import check_compile, compile_flags

    compile = compile_flags(grid.compile, grid.graphs)
    if compile:
        if engine != "hf":
            raise JfbenchError(f"--compile applies to the hf engine only: drop it for --engine {engine}")
        check_compiled_budgets(drafters, budgets)
        check_compile(dev, grid.attention, compile)
    loads = parse_loads(load) if load is not None else ()
    check_load_grid(loads, sizes, compile)
    set_threads(grid.threads)
    dtype = str(resolve_dtype(grid.dtype, dev)).removeprefix("torch.")
    tie_eps = DEFAULT_TIE_EPS[dtype] if grid.tie_eps is None else grid.tie_eps
    return SweepConfig(
        target=absolute_target(target), drafters=tuple(drafters), suites=suites, budgets=budgets,
        batch_sizes=sizes, repeats=1 if grid.tau_only else grid.repeats, device=str(dev),
        dtype=dtype, threads=torch.get_num_threads(),
        limit=grid.limit, max_new_tokens=grid.max_new_tokens, temperatures=temperatures,
        top_p=grid.top_p, top_k=grid.top_k,
        sample_seed=grid.sample_seed, seed=grid.seed, engine=engine, tie_eps=tie_eps, attention=grid.attention,
        profile=grid.profile, compile=compile, tau_only=grid.tau_only, loads=loads, extra=extra,
    )


def grid_temperatures(grid: GridFlags) -> tuple[float, ...]:
    """The temperature axis, with every sampling flag range-checked (before any model loads).

    --temperatures wins; --temperature T is the one-value shorthand; giving both is an error.
    """
    from jetflow_bench.engine.sampling import SamplingParams
    from jetflow_bench.sweep.grid import parse_temperatures

    if grid.temperatures is not None and grid.temperature != 0:
        raise JfbenchError(f"--temperature {grid.temperature} and --temperatures {grid.temperatures!r}: give one of them")
    temperatures = parse_temperatures(grid.temperatures if grid.temperatures is not None else str(grid.temperature))
    SamplingParams(max(temperatures), grid.top_p, grid.top_k, grid.seed)
    return temperatures


def grid_executor(grid: GridFlags) -> contextlib.AbstractContextManager[GroupExecutor | None]:
    """The --executor, connected while entered (None: cells run in this process); `grid_config` calls
    it to check the flags before any model loads."""
    if grid.executor == "local":
        return contextlib.nullcontext()
    if grid.executor != "ray":
        raise JfbenchError(f"--executor {grid.executor!r}: use local or ray")
    from jetflow_bench.sweep.ray_executor import RayExecutor, RayOptions

    return RayExecutor(RayOptions(grid.ray_address, grid.ray_gpus_per_task, grid.ray_cpus_per_task, grid.ray_max_retries))


def run_and_report(
    config: SweepConfig, out: Path, grid: GridFlags, kind: str = "sweep", derived: Derived | None = None,
    engine_options: VLLMOptions | None = None, allow_other_target: bool = False, allow_flag: str = "",
    columns: str | None = None, heads_pinned: bool = False,
) -> None:
    """Run the grid; notes and a one-line result on stderr; the summary (``columns``: as `show
    --columns`; None: its default); exit 1 under --strict on divergences.

    Every head is checked against the target it was trained on first (`pin_heads`; ``allow_flag``:
    the command's flag that allows another target, empty where it has none), unless ``heads_pinned``
    (ablate checks its heads before training any, `AblationPlan.pinned`)."""
    from jetflow_bench.cli import KEPT_ON_INTERRUPT
    from jetflow_bench.sweep.arms import pin_heads
    from jetflow_bench.sweep.driver import run_sweep
    from jetflow_bench.sweep.memory import parse_size

    KEPT_ON_INTERRUPT.append(lambda: f"{len(list((out / 'cells').glob('*.json')))} cells kept")

    if not heads_pinned:
        config = replace(config, drafters=tuple(pin_heads(config.drafters, config.target, allow_other_target, allow_flag)))
    max_memory = parse_size(grid.max_memory) if grid.max_memory is not None else None
    with grid_executor(grid) as executor:
        outcome = run_sweep(config, out, command=sys.argv, data_dir=grid.data_dir, force=grid.force, kind=kind,
                            show_progress=grid.progress, derived=derived, max_memory=max_memory,
                            engine_options=engine_options, executor=executor)
    from jetflow_bench.core.progress import say

    for note in outcome.notes:
        say(note)
    say(f"{out}: {outcome.ran} cell(s) run, {outcome.skipped} already done; `jfbench show {out} --wide` "
        "shows every column")
    if (out / "summary.parquet").exists():
        from jetflow_bench.cli.show_cmd import show

        show(out, columns=columns)
    if outcome.unexcused:
        print(f"{'error' if grid.strict else 'warning'}: {outcome.unexcused} request(s) diverge from the AR "
              "baseline beyond fp near-ties (see requests.parquet: lossless, first_divergence)", file=sys.stderr)
        if grid.strict:
            raise typer.Exit(1)
