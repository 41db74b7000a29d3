"""`jfbench bench ...`: benchmark commands that compare two things in one run and print the ratio."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from jetflow_bench.cli import app
from jetflow_bench.cli.options import DataDirOpt, DeviceOpt, DtypeOpt, TargetOpt, ThreadsOpt
from jetflow_bench.errors import JfbenchError
from jetflow_bench.runtime import data_dir as resolve_data_dir
from jetflow_bench.runtime import set_threads

bench_app = typer.Typer(help="Speed benchmarks that compare two implementations in one run.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


@bench_app.command("baseline")
def baseline(
    target: TargetOpt,
    suite: Annotated[str, typer.Option(help="Suite whose first prompts are used.")] = "gsm8k",
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated batch sizes.")] = "1,4",
    max_new_tokens: Annotated[int, typer.Option(min=1, help="Tokens generated per prompt (no early EOS).")] = 128,
    repeats: Annotated[int, typer.Option(min=3, help="Timed repeats per implementation (>= 3).")] = 3,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    data_dir: DataDirOpt = None,
    threads: ThreadsOpt = None,
) -> None:
    """Time our AR baseline against `transformers` generate (greedy, same prompts and lengths).

    A baseline slower than the best plain decoder inflates every speed-up, so the ratio
    (ours / HF tokens per second) should be >= 1.0.

    Example: jfbench bench baseline --target ~/.cache/jfbench/targets/tiny-seed0-... --batch-sizes 1,4
    """
    import torch

    from jetflow_bench.bench_baseline import compare_with_hf
    from jetflow_bench.prompts import encode, suite_requests
    from jetflow_bench.target import TargetRunner

    set_threads(threads)
    sizes = _int_list(batch_sizes, "--batch-sizes")
    runner = TargetRunner.load(target, device=device, dtype=dtype)
    requests = suite_requests(runner, suite, resolve_data_dir(data_dir), limit=max(sizes))
    prompts = [encode(runner, r.prompt) for r in requests]
    if len(prompts) < max(sizes):
        raise JfbenchError(f"suite {suite!r} has only {len(prompts)} prompts: lower --batch-sizes")
    console = Console(stderr=True)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("timing ours vs transformers.generate", total=len(sizes) * repeats)
        rows = compare_with_hf(runner, prompts, max_new_tokens, sizes, repeats, lambda: progress.advance(task))
    table = Table(title=f"AR baseline vs transformers generate — {runner.name}, {max_new_tokens} new tokens")
    for col in ("batch", "ours tok/s (min–max)", "HF tok/s (min–max)", "ratio ours/HF", "same tokens"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r.batch_size),
            f"{r.ours_tok_s:.1f} ({r.ours_spread[0]:.1f}–{r.ours_spread[1]:.1f})",
            f"{r.hf_tok_s:.1f} ({r.hf_spread[0]:.1f}–{r.hf_spread[1]:.1f})",
            f"{r.ratio:.2f}x",
            "yes" if r.same_tokens else "no",
        )
    Console().print(table)
    Console().print(f"device {runner.device}, dtype {runner.dtype}, torch threads {torch.get_num_threads()}")


def _int_list(spec: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in spec.split(",") if x.strip()]
    except ValueError as err:
        raise JfbenchError(f"{flag} {spec!r} must be comma-separated integers, e.g. 1,4") from err
    if not values or min(values) < 1:
        raise JfbenchError(f"{flag} {spec!r} must list positive integers, e.g. 1,4")
    return values
