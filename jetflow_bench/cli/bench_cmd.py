"""`jfbench bench ...`: benchmark commands that compare two things in one run and print the ratio."""

from __future__ import annotations

import contextlib
import statistics
import tempfile
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress

from jetflow_bench.cli import app
from jetflow_bench.cli.options import (
    AttentionOpt,
    CompileOpt,
    DataDirOpt,
    DeviceOpt,
    DtypeOpt,
    GraphsOpt,
    TargetOpt,
    ThreadsOpt,
)
from jetflow_bench.cli.output import TableFormat, TableFormatOpt, emit
from jetflow_bench.cli.vllm_options import VLLMBinOpt
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.runtime import core_list, cpu_cores, pin_cores, set_threads
from jetflow_bench.core.runtime import data_dir as resolve_data_dir

bench_app = typer.Typer(help="Speed benchmarks that compare two implementations in one run.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


class Against(str, Enum):
    transformers = "transformers"
    vllm = "vllm"


@bench_app.command("baseline")
def baseline(
    target: TargetOpt,
    against: Annotated[
        Against, typer.Option("--against", help="The plain decoder to time ours against: transformers generate (in "
                              "this process) or vLLM (a managed `vllm serve`, bound to the same cores).")
    ] = Against.transformers,
    suite: Annotated[str, typer.Option(help="Suite whose first prompts are used.")] = "gsm8k",
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated batch sizes.")] = "1,4",
    max_new_tokens: Annotated[int, typer.Option(min=2, help="Tokens generated per prompt (no early EOS).")] = 128,
    pairs: Annotated[
        int, typer.Option("--pairs", min=3, help="Timed back-to-back pairs (ours, theirs) per batch size (>= 3).")
    ] = 5,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    attention: AttentionOpt = "sdpa",
    compile: CompileOpt = False,
    graphs: GraphsOpt = False,
    hf_static_cache: Annotated[bool, typer.Option(
        "--hf-static-cache", help="--against transformers: generate with its static cache (its fast path: on a GPU it "
        "also compiles the forward, in the untimed warm-up).")] = False,
    data_dir: DataDirOpt = None,
    threads: ThreadsOpt = None,
    vllm_bin: VLLMBinOpt = None,
    fmt: TableFormatOpt = TableFormat.table,
) -> None:
    """Time our AR baseline against another plain greedy decoder (same prompts, lengths and cores).

    A baseline slower than the best plain decoder inflates every speed-up, so the ratio
    (ours / theirs decode tokens per second) should be >= 1.0. This process is pinned to the first
    --threads cores it may use; `--against vllm` starts `vllm serve` with its OpenMP threads bound
    to the same cores (VLLM_CPU_OMP_THREADS_BIND). Both sides are timed as jfbench defines decode
    time: from a batch's first generated token to its last request's end, over the tokens after the
    first (prefill excluded). The two run as interleaved pairs; the ratio is the mean of the per-pair
    ratios with a 95% bootstrap CI over pairs (and their min–max); a CI that spans 1.0 is reported
    as unresolved (the machine is too noisy to tell).

    Examples:

        jfbench bench baseline --target smollm2-135m-instruct --batch-sizes 1,4 --threads 1

        jfbench bench baseline --target smollm2-135m-instruct --against vllm --batch-sizes 1 --threads 1 --pairs 10
    """
    import torch

    from jetflow_bench.bench.baseline import compare
    from jetflow_bench.engine.compiled import compile_flags
    from jetflow_bench.engine.target import TargetRunner
    from jetflow_bench.sweep.prompts import encode, suite_requests

    if vllm_bin is not None and against is not Against.vllm:
        raise JfbenchError("--vllm-bin is for --against vllm: add --against vllm, or leave --vllm-bin out")
    if hf_static_cache and against is not Against.transformers:
        raise JfbenchError("--hf-static-cache is for --against transformers: leave it out with --against vllm")
    set_threads(threads)
    cores = cpu_cores(torch.get_num_threads())
    pin_cores(cores)  # before torch starts its thread pool: ours (and transformers) run on these cores only
    sizes = _int_list(batch_sizes, "--batch-sizes")
    runner = TargetRunner.load(target, device=device, dtype=dtype, attention=attention,
                               compile=compile_flags(compile, graphs))
    requests = suite_requests(runner, suite, resolve_data_dir(data_dir), limit=max(sizes))
    prompts = [encode(runner, r.prompt) for r in requests]
    if len(prompts) < max(sizes):
        raise JfbenchError(f"suite {suite!r} has only {len(prompts)} prompts: lower --batch-sizes")
    with _rival(against, runner, target, vllm_bin, hf_static_cache, max(sizes), cores) as rival:
        with Progress(console=Console(stderr=True), transient=True) as progress:
            task = progress.add_task(f"timing ours vs {rival.name}", total=len(sizes) * pairs)
            rows = compare(runner, rival, prompts, max_new_tokens, sizes, pairs, lambda: progress.advance(task))
        theirs = rival.describe()
    name = rival.name
    emit([{
        "batch": r.batch_size, "pairs": len(r.ratios),
        "ours tok/s": f"{statistics.median(r.ours_tok_s):.1f}", f"{name} tok/s": f"{statistics.median(r.theirs_tok_s):.1f}",
        f"ratio ours/{name} [95% CI]": "{:.2f}x [{:.2f}, {:.2f}]".format(*r.ratio_ci),
        "ratio min–max": f"{min(r.ratios):.2f}–{max(r.ratios):.2f}", "verdict": r.verdict,
        "same tokens": "yes" if r.same_tokens else "no",
    } for r in rows], fmt, title=f"AR baseline vs {name}, decode tokens/s (median of pairs) — {runner.name}, "
                                 f"{max_new_tokens} new tokens",
        caption=f"device {runner.device}, dtype {runner.dtype}, torch threads {torch.get_num_threads()}, cores "
                f"{core_list(cores)}; theirs: {theirs}"
                + (f"; ours --compile {runner.compile_mode} (warm-up {sum(r.compile_s for r in rows):.1f} s, untimed)"
                   if runner.compile_mode else ""))
    if fmt != TableFormat.table:  # json, csv and markdown have no caption
        Console(stderr=True).print(f"cores {core_list(cores)}; theirs: {theirs}")
    if not all(r.resolved for r in rows):
        Console(stderr=True).print("note: for some batch size the ratio's CI spans 1.0: rerun on an idle "
                                   "machine or with more --pairs before concluding")


def _rival(against: Against, runner, target: str, vllm_bin: str | None, hf_static_cache: bool, max_batch: int,
           cores: tuple[int, ...]):  # fmt: skip
    """The rival decoder as a context manager (a vLLM server stops when the benchmark ends)."""
    from jetflow_bench.bench.baseline import Transformers

    if against is Against.transformers:
        return contextlib.nullcontext(Transformers(runner, hf_static_cache))
    from jetflow_bench.integrations.vllm_engine import VLLMOptions
    from jetflow_bench.integrations.vllm_plain import VLLMPlain
    from jetflow_bench.integrations.vllm_server import ServerConfig

    found = VLLMOptions.resolve(vllm_bin, None, None, None, 1, 1).vllm_bin
    dtype = str(runner.dtype).removeprefix("torch.")
    cpus = cores if runner.device.type == "cpu" else ()
    log = Path(tempfile.mkdtemp(prefix="jfbench-bench-vllm-")) / "vllm.log"
    return VLLMPlain(found, ServerConfig(target, dtype, None, max_batch, cpus=cpus), log)


@bench_app.command("drafter")
def drafter(
    target: TargetOpt,
    drafters: Annotated[
        list[str], typer.Option("--drafter", help="NAME[KEY=VALUE,...]=CHECKPOINT_DIR (NAME for ngram); repeatable.")
    ],
    budgets: Annotated[str, typer.Option(help="Comma-separated budgets B (tree nodes incl. root).")] = "16,64,256",
    suite: Annotated[str, typer.Option(help="Suite whose first prompts are used.")] = "gsm8k",
    batch_size: Annotated[int, typer.Option(min=1, help="Prompts decoded together.")] = 1,
    prompts: Annotated[
        int, typer.Option("--prompts", min=1, help="Prompts timed, decoded in batches of --batch-size one after another "
                          "(a multiple of it): more prompts, a steadier split.")
    ] = 8,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Tokens generated per prompt (no early EOS).")] = 128,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    data_dir: DataDirOpt = None,
    threads: ThreadsOpt = None,
    fmt: TableFormatOpt = TableFormat.table,
) -> None:
    """Split each drafter's time per verify step into head forwards, tree construction and the rest,
    beside the verify time and a plain AR step, measured in one run per drafter and budget.

    The non-forward share = (drafting - head forwards) / drafting is host work that a faster device
    does not shrink. Every timed span synchronises the device: the split is exact, the run slower
    than a sweep. Times are means per verify step (batched forward), in milliseconds.

    Example: jfbench bench drafter --target DIR --drafter jetflow=heads/jf --drafter eagle=heads/eagle
    --budgets 16,64,256
    """
    from drafters import DRAFTERS
    from jetflow_bench.bench.drafter import ar_step_ms, split_drafter
    from jetflow_bench.engine.stopping import StopRule
    from jetflow_bench.engine.target import TargetRunner
    from jetflow_bench.sweep.arm_syntax import parse_drafters
    from jetflow_bench.sweep.arms import arm_spec
    from jetflow_bench.sweep.grid import parse_sizes
    from jetflow_bench.sweep.prompts import encode, suite_requests

    if prompts % batch_size:
        raise JfbenchError(f"--prompts {prompts} is not a multiple of --batch-size {batch_size}: "
                           f"use e.g. --prompts {prompts - prompts % batch_size or batch_size}")
    set_threads(threads)
    sizes = parse_sizes(budgets, "bench drafter")
    specs = [arm_spec(name, options, ckpt) for text in drafters for name, options, ckpt in
             parse_drafters(text, "--drafter")]
    runner = TargetRunner.load(target, device=device, dtype=dtype)
    requests = suite_requests(runner, suite, resolve_data_dir(data_dir), limit=prompts)
    if len(requests) < prompts:
        raise JfbenchError(f"suite {suite!r} has only {len(requests)} prompts: lower --prompts")
    encoded = [encode(runner, r.prompt) for r in requests]
    batches = [encoded[i : i + batch_size] for i in range(0, prompts, batch_size)]
    stop = StopRule(max_new_tokens)  # no early EOS: every run decodes the same length
    ar_ms = ar_step_ms(runner, batches, stop)
    splits = []
    for spec in specs:
        built = DRAFTERS.get(spec.name).build(runner, checkpoint=spec.checkpoint, **dict(spec.options))
        label = spec.label
        splits += [split_drafter(label, built, runner, batches, stop, budget, ar_ms) for budget in sizes]
    if fmt in (TableFormat.json, TableFormat.csv):
        emit([s.row() for s in splits], fmt)
        return
    emit([{
        "drafter": s.drafter, "B": s.budget, "steps": s.steps, "τ": f"{s.tau:.2f}", "draft": f"{s.draft_ms:.2f}",
        "head fwd": f"{s.head_ms:.2f}", "tree": f"{s.tree_ms:.2f}", "rest": f"{s.rest_ms:.2f}",
        "non-fwd share": f"{s.non_forward_share:.0%}", "verify": f"{s.verify_ms:.2f}", "AR step": f"{s.ar_step_ms:.2f}",
    } for s in splits], fmt, left=("drafter",),
        title=f"drafting time per verify step (ms) — {runner.name}, {prompts} prompts in batches of {batch_size}, "
              f"{max_new_tokens} new tokens",
        caption=f"device {runner.device}, dtype {runner.dtype}; non-fwd share = (draft - head fwd) / draft")


def _int_list(spec: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError as err:
        raise JfbenchError(f"{flag} {spec!r} must be comma-separated integers, e.g. 1,4") from err
    if not values or min(values) < 1:
        raise JfbenchError(f"{flag} {spec!r} must list positive integers, e.g. 1,4")
    return values


@bench_app.command("verify-cost")
def verify_cost(
    target: TargetOpt,
    sizes: Annotated[str, typer.Option(help="Comma-separated tree sizes N (nodes incl. root); 1 is always added.")] = "1,16,64,256",
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated batch sizes.")] = "1,4",
    context: Annotated[
        int, typer.Option(min=1, help="Committed tokens per sequence while timing: match the runs you project (mean prompt + half the new tokens).")
    ] = 256,
    repeats: Annotated[int, typer.Option(min=3, help="Timed forwards per point, round-robin over sizes; the median is kept (>= 3).")] = 25,
    out: Annotated[Path, typer.Option(help="Calibration file to write (JSON).")] = Path("verify-cost.json"),
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    threads: ThreadsOpt = None,
    fmt: TableFormatOpt = TableFormat.table,
) -> None:
    """Time the target's verify forward against tree size and batch size on this device and write a
    calibration file; `jfbench project RUN --calibration FILE` then uses the measured times instead of
    the roofline (the `cpu-here` profile) and prices draft heads with the device terms fitted here.

    Example: jfbench bench verify-cost --target ~/.cache/jfbench/targets/micro-seed0-... --sizes 1,4,16,64 --out cal.json
    """
    from jetflow_bench.engine.target import TargetRunner
    from jetflow_bench.projection.measure import measure
    from jetflow_bench.projection.shapes import shape_from_config
    from jetflow_bench.projection.verify_cost import write_calibration

    set_threads(threads)
    tree_sizes = sorted({1, *_int_list(sizes, "--sizes")})
    batches = _int_list(batch_sizes, "--batch-sizes")
    runner = TargetRunner.load(target, device=device, dtype=dtype)
    shape = shape_from_config(runner.config.to_dict(), runner.name)
    if context + max(tree_sizes) > runner.context_window:
        raise JfbenchError(
            f"--context {context} + tree size {max(tree_sizes)} exceeds the target's context window "
            f"({runner.context_window}): lower --context or --sizes"
        )
    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task("timing verify forwards", total=len(batches))
        data = measure(runner, shape, tree_sizes, batches, context, repeats, lambda: progress.advance(task))
    write_calibration(out, data)
    prof = data["profile"]
    emit([{"batch": p["batch"], "tree N": p["tokens"], "verify ms": f"{p['verify_s'] * 1e3:.2f}",
           "verify min ms": f"{p['verify_min_s'] * 1e3:.2f}", "bookkeeping ms": f"{p['bookkeeping_s'] * 1e3:.2f}"}
          for p in data["points"]], fmt,
         title=f"Verify step on {data['device']} — {runner.name}, context {context}",
         caption=(f"fitted: {prof['layer_overhead_s'] * 1e6:.0f} µs per layer unit, {prof['peak_flops'] / 1e9:.1f} "
                  f"GFLOP/s, copy bandwidth {prof['memory_bandwidth'] / 1e9:.1f} GB/s; written to {out}"))


@bench_app.command("compile")
def compile_(
    target: TargetOpt,
    drafters: Annotated[
        list[str] | None,
        typer.Option("--drafter", help="NAME[KEY=VALUE,...]=CHECKPOINT_DIR (NAME for ngram); repeatable. Default: AR only."),
    ] = None,
    budgets: Annotated[str, typer.Option(help="Comma-separated budgets for the drafter arms.")] = "16,64,256",
    sizes: Annotated[str, typer.Option(help="Comma-separated verify tree sizes N; 1 (the AR step) is always added.")] = "16,64,256",
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated batch sizes of the forward timings.")] = "1",
    context: Annotated[int, typer.Option(min=1, help="Committed tokens per row while timing forwards.")] = 256,
    repeats: Annotated[int, typer.Option(min=3, help="Timed forwards per point, round-robin; the median is kept.")] = 10,
    suite: Annotated[str, typer.Option(help="Suite whose first prompts the decodes use.")] = "gsm8k",
    prompts: Annotated[int, typer.Option("--prompts", min=1, help="Prompts decoded together in each decode run.")] = 1,
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Tokens generated per prompt (no early EOS).")] = 64,
    pairs: Annotated[int, typer.Option("--pairs", min=3, help="Timed (eager, compiled) decode pairs per arm.")] = 3,
    graphs: Annotated[bool, typer.Option("--graphs", help="Compare eager with --graphs (CUDA graphs, no compiler; a "
                                         "GPU only) instead of --compile (Inductor).")] = False,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    data_dir: DataDirOpt = None,
    threads: ThreadsOpt = None,
    fmt: TableFormatOpt = TableFormat.table,
) -> None:
    """Eager vs --compile on this machine, paired in one run: the AR step and verify forwards at each
    tree size, then whole decodes per arm (tokens/s, drafting and verify per step; a learned arm's
    head is compiled on the compiled side). Speed-up > 1 means compiling pays; compile time is
    printed apart and is in no timed number.

    Example: jfbench bench compile --target ~/.cache/jfbench/targets/micro-seed0-... --sizes 16,64,256
    --drafter ngram,jetflow=HEAD_DIR --budgets 16
    """
    import torch

    from drafters import DRAFTERS
    from jetflow_bench.bench.compile import DecodeArm, compare_decodes, compare_forwards
    from jetflow_bench.engine.stopping import StopRule
    from jetflow_bench.engine.target import TargetRunner
    from jetflow_bench.sweep.arm_syntax import parse_drafters
    from jetflow_bench.sweep.arms import arm_spec
    from jetflow_bench.sweep.grid import parse_sizes
    from jetflow_bench.sweep.prompts import encode, suite_requests

    set_threads(threads)
    tree_sizes = sorted({1, *_int_list(sizes, "--sizes")})
    batches = _int_list(batch_sizes, "--batch-sizes")
    arm_budgets = parse_sizes(budgets, "bench compile") if drafters else ()
    specs = [arm_spec(name, options, ckpt) for text in drafters or () for name, options, ckpt in
             parse_drafters(text, "--drafter")]
    eager = TargetRunner.load(target, device=device, dtype=dtype)
    compiled = TargetRunner(eager.model, eager.tokenizer, eager.name, compile="graphs" if graphs else "inductor")
    if context + max(tree_sizes) > eager.context_window:
        raise JfbenchError(f"--context {context} + tree size {max(tree_sizes)} exceeds the target's context window "
                           f"({eager.context_window}): lower --context or --sizes")
    requests = suite_requests(eager, suite, resolve_data_dir(data_dir), limit=prompts)
    if len(requests) < prompts:
        raise JfbenchError(f"suite {suite!r} has only {len(requests)} prompts: lower --prompts")
    encoded = [encode(eager, r.prompt) for r in requests]
    arms = [DecodeArm("ar", 1, None, None)]
    for spec in specs:  # each side its own drafter: on the compiled runner a learned head compiles too
        built = {side: DRAFTERS.get(spec.name).build(runner, checkpoint=spec.checkpoint, **dict(spec.options))
                 for side, runner in (("eager", eager), ("compiled", compiled))}
        arms += [DecodeArm(spec.label, b, built["eager"], built["compiled"]) for b in arm_budgets]
    console = Console(stderr=True)
    with console.status("timing forwards (compiling first)"):
        forwards, forward_compile_s = compare_forwards(eager, compiled, tree_sizes, batches, context, repeats)
    with console.status("timing decodes"):
        decodes, decode_compile_s, heads_compile_s = compare_decodes(eager, compiled, encoded, StopRule(max_new_tokens),
                                                                     arms, pairs)
    caption = (f"device {eager.device}, dtype {eager.dtype}, torch threads {torch.get_num_threads()}, torch "
               f"{torch.__version__}; {'--graphs' if graphs else '--compile'} (untimed warm-up): {forward_compile_s:.1f} s for the forwards, "
               f"{decode_compile_s:.1f} s more for the decodes' target shapes, {heads_compile_s:.1f} s for the draft heads")
    if fmt != TableFormat.table:  # json, csv and markdown have no caption: the compile time goes to stderr
        console.print(caption)
    if fmt in (TableFormat.json, TableFormat.csv):
        emit([{"kind": "forward", **vars(f), "speedup": f.speedup} for f in forwards]
             + [{"kind": "decode", **vars(d), "speedup": d.speedup} for d in decodes], fmt)
        return
    emit([{"batch": f.batch, "N": f.tokens, "eager ms": f"{f.eager_ms:.2f}", "compiled ms": f"{f.compiled_ms:.2f}",
           "speed-up": f"{f.speedup:.2f}x"} for f in forwards], fmt,
         title=f"verify step (prepare + forward; N = 1 is the AR step), eager vs compiled — {eager.name}, "
               f"context {context}, median of {repeats}", caption=caption)
    emit([{"arm": d.arm, "B": d.budget, "batch": d.batch, "eager tok/s": f"{d.eager_tok_s:.1f}",
           "compiled tok/s": f"{d.compiled_tok_s:.1f}", "speed-up": f"{d.speedup:.2f}x",
           "draft ms e/c": f"{d.eager_draft_ms:.2f} / {d.compiled_draft_ms:.2f}",
           "verify ms e/c": f"{d.eager_verify_ms:.2f} / {d.compiled_verify_ms:.2f}",
           "same tokens": "yes" if d.same_tokens else "NO"} for d in decodes], fmt, left=("arm",),
         title=f"decodes, eager vs compiled target and heads — {len(encoded)} prompt(s) of {suite}, {max_new_tokens} new tokens, "
               f"median of {pairs} pairs", caption=caption)
