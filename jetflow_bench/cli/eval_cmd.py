"""`jfbench eval`: accuracy under speculative decoding, measured by lm-evaluation-harness."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from jetflow_bench.cli import app
from jetflow_bench.cli.options import (
    AllowOtherTargetOpt,
    AttentionOpt,
    DataDirOpt,
    DeviceOpt,
    DtypeOpt,
    SamplingSeedOpt,
    TargetOpt,
    TemperatureOpt,
    ThreadsOpt,
    TopKOpt,
    TopPOpt,
)
from jetflow_bench.cli.output import TableFormat, TableFormatOpt, emit
from jetflow_bench.core.errors import JfbenchError


@app.command("eval")
def eval_(
    target: TargetOpt,
    drafter: Annotated[
        str, typer.Option("--drafter", help="Drafter of the speculative arm: ngram, NAME=HEAD_DIR, or none.")
    ] = "none",
    budget: Annotated[
        int | None, typer.Option("--budget", min=1, help="Tree nodes per verify step, root included. Default: 64 (1 without a drafter).")
    ] = None,
    tasks: Annotated[
        str, typer.Option("--tasks", help="jfbench suites (gsm8k, math500, aime25, humaneval, mbpp) or harness task names.")
    ] = "gsm8k",
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="First N records per task. Default: all.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Requests decoded together.")] = 8,
    max_gen_toks: Annotated[
        int | None, typer.Option("--max-gen-toks", min=1, help="New tokens per request. Default: each task's own.")
    ] = None,
    compare_plain: Annotated[
        bool, typer.Option("--compare-plain", help="Also run plain decoding and print both accuracy tables.")
    ] = False,
    confirm_run_unsafe_code: Annotated[
        bool, typer.Option("--confirm-run-unsafe-code", help="Allow code tasks (humaneval, mbpp) to execute model code.")
    ] = False,
    strict: Annotated[
        bool, typer.Option("--strict", help="With --compare-plain: exit 1 when an accuracy or a generation differs "
                           "(at temperature > 0: when the accuracies differ by more than 1.96 standard errors).")
    ] = False,
    temperature: TemperatureOpt = 0.0,
    top_p: TopPOpt = 1.0,
    top_k: TopKOpt = 0,
    seed: SamplingSeedOpt = 0,
    attention: AttentionOpt = "sdpa",
    allow_other_target: AllowOtherTargetOpt = False,
    out: Annotated[Path | None, typer.Option("--out", help="Run folder. Default: results/eval-<time>.")] = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    data_dir: DataDirOpt = None,
    threads: ThreadsOpt = None,
    fmt: TableFormatOpt = TableFormat.table,
) -> None:
    """Run lm-evaluation-harness tasks on the `jfbench` model (target + drafter; greedy unless --temperature).

    jfbench suite names run jfbench's offline harness tasks (the suite's own prompts and answer
    checks, data from --data-dir); the chat variant is chosen when the target has a chat template,
    as jfbench's own runs do. Speculative greedy decoding is lossless, so --compare-plain must show
    the same accuracy and the same generations; the table adds τ (tokens per verify step). At
    --temperature > 0 every arm samples (one random stream per request, the same in both arms), so
    speculative sampling is distribution-preserving: accuracies agree within their standard
    errors, and generations agree only up to floating-point differences in the target's logits.

    Examples:

        jfbench eval --target T --drafter jetflow=HEAD --budget 64 --tasks gsm8k --limit 64 --compare-plain

        jfbench eval --target T --drafter ngram --tasks humaneval,mbpp --confirm-run-unsafe-code

        jfbench eval --target T --drafter jetflow=HEAD --tasks gsm8k --limit 64 --compare-plain --temperature 1
    """
    from jetflow_bench.core.runtime import resolve_device, set_threads
    from jetflow_bench.engine.attention import get_attention
    from jetflow_bench.engine.sampling import SamplingParams
    from jetflow_bench.integrations.lm_eval_run import (
        EvalConfig,
        check_data_dir,
        default_out,
        differs_from_plain,
        require_lm_eval,
        run_eval,
    )

    require_lm_eval()
    names = [t.strip() for t in tasks.split(",") if t.strip()]
    if not names:
        raise JfbenchError("--tasks is empty: name at least one, e.g. --tasks gsm8k")
    if compare_plain and drafter.strip().lower() == "none":
        raise JfbenchError("--compare-plain compares a drafter with plain decoding: pass --drafter, e.g. ngram")
    sampling = SamplingParams(temperature, top_p, top_k, seed)  # bad values fail before any model loads
    check_data_dir(data_dir)
    transfer = _transferred_head(drafter, target, allow_other_target)
    # A GPU asked for where there is none is an error here (the harness model would fall back to the CPU);
    # an unknown or unavailable attention backend fails before any model loads.
    get_attention(attention, resolve_device(device))
    set_threads(threads)
    config = EvalConfig(
        target=target, drafter="none" if drafter.strip().lower() == "none" else drafter.strip(), budget=budget,
        tasks=tuple(names), data_dir=data_dir, limit=limit, batch_size=batch_size, device=device, dtype=dtype,
        attention=attention, max_gen_toks=max_gen_toks, confirm_run_unsafe_code=confirm_run_unsafe_code,
        compare_plain=compare_plain, **sampling.describe(),
    )
    folder = out or default_out()
    summary = run_eval(config, folder, sys.argv)
    title = f"lm-eval accuracy — drafter {summary['config']['drafter']}, budget {summary['budget']}"
    if transfer:
        title += ", head trained on another target (--allow-other-target)"
    if not sampling.greedy:
        title += f", sampled at T = {temperature:g} (distribution-preserving; compare accuracies within their stderr)"
    emit(display_rows(summary["rows"]), fmt, title=title, left=("task", "metric"))
    print(f"run folder: {folder} (per arm: harness results.json, samples_*.jsonl, speculation.json; eval.json)",
          file=sys.stderr)
    differs = [r for r in summary["rows"] if differs_from_plain(r, sampled=not sampling.greedy)]
    if strict and differs:
        raise typer.Exit(1)


def _transferred_head(drafter: str, target: str, allow_other_target: bool) -> bool:
    """Whether the arm's head was trained on another target (allowed by ``allow_other_target``,
    else refused in one line, before any model loads); the sweep's check (`other_target_heads`)."""
    from jetflow_bench.sweep.arm_syntax import parse_drafters
    from jetflow_bench.sweep.arms import arm_spec, other_target_heads

    if drafter.strip().lower() == "none":
        return False
    specs = [arm_spec(name, options, ckpt) for name, options, ckpt in parse_drafters(drafter, "--drafter")]
    return bool(other_target_heads(specs, target, allow_other_target, "--allow-other-target"))


def display_rows(rows: list[dict]) -> list[dict]:
    """The comparison rows as printed: scores with the harness's standard error, τ, plain's score."""
    out = []
    for row in rows:
        shown = {"task": row["task"], "metric": row["metric"], "score": f"{row['score']:.4f}",
                 "stderr": "" if row["stderr"] is None else f"{row['stderr']:.4f}",
                 "τ": "" if row["tau"] is None else f"{row['tau']:.2f}"}
        if "plain_score" in row:
            shown["plain decoding"] = f"{row['plain_score']:.4f}"
            shown["same generations"] = f"{row['same_generations']}/{row['generations']}"
        out.append(shown)
    return out
