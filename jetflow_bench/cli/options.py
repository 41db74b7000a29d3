"""Option aliases shared by every command, so the same flag has the same name and help everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

DeviceOpt = Annotated[
    str | None,
    typer.Option("--device", help="cpu, cuda or cuda:N. Default: cuda when a GPU is present, else cpu."),
]
DtypeOpt = Annotated[
    str | None,
    typer.Option("--dtype", help="float32, bfloat16 or float16. Default: float32 on CPU, bfloat16 on GPU."),
]
def _as_path(value: str | Path | None) -> Path | None:
    """Some typer versions hand a Path option read from its environment variable over as a str (seen
    on the H200 machine: `jfbench sweep` died on `str / str`); every command gets a Path."""
    return None if value is None else Path(value)


DataDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        envvar="JFBENCH_DATA_DIR",
        callback=_as_path,
        help="Folder with the benchmark data files (layout: docs/methodology.md, Data). Env: JFBENCH_DATA_DIR.",
    ),
]


def _resolve_target(value: str | None) -> str | None:
    """Names (micro, tiny, deep, smollm2-135m-instruct) become their cached folders before any work starts."""
    if value is None:
        return None
    from jetflow_bench.targets import resolve_target

    return resolve_target(value)


TargetOpt = Annotated[
    str,
    typer.Option(
        "--target",
        callback=_resolve_target,
        help="Target model: a name from `jfbench target list` (micro, tiny, deep, smollm2-135m-instruct), "
        "a local model folder or a Hugging Face hub id.",
    ),
]
AllowOtherTargetOpt = Annotated[
    bool,
    typer.Option(
        "--allow-other-target",
        help="Use a head trained on another target than --target (a deliberate transfer): the arm is marked "
        "other-target in every table. Without it such a head is refused.",
    ),
]
AttentionOpt = Annotated[
    str,
    typer.Option(
        "--attention",
        help="Attention backend of the target and the draft heads: sdpa (reference), triton (tree-attention kernel; "
        "on a CPU only with TRITON_INTERPRET=1, for correctness, slow) or flex (FlexAttention). Default: sdpa on every "
        "device; triton becomes the CUDA default only after scripts/gpu_check.sh has passed on a real GPU.",
    ),
]
CompileOpt = Annotated[
    bool,
    typer.Option(
        "--compile/--no-compile",
        help="Run the target's decode and verify forwards, and learned drafters' head forwards, at bucketed static "
        "shapes through Inductor, one decoder layer built and reused for every layer (and recorded as CUDA graphs on a "
        "GPU); the build is an untimed warm-up. Needs --attention sdpa (and a C compiler on a CPU). Off by default: "
        "results/baselines/compile-cpu/README.md has the measurements behind that choice.",
    ),
]
GraphsOpt = Annotated[
    bool,
    typer.Option(
        "--graphs",
        help="Like --compile with no compiler: the static-shape steps are recorded as CUDA graphs and replayed (a GPU "
        "only; recording every shape takes seconds, not an Inductor build). Needs --attention sdpa.",
    ),
]
ThreadsOpt = Annotated[
    int | None,
    typer.Option("--threads", min=1, help="torch CPU threads. Default: torch's own choice."),
]


# Sampling (sweep, ablate, demo; `jfbench eval` takes the same): temperature 0 is greedy, which
# ignores top-p and top-k. Build `jetflow_bench.engine.sampling.SamplingParams` from them inside the command:
# it range-checks them with one-line errors.
TemperatureOpt = Annotated[
    float, typer.Option("--temperature", help="Sampling temperature; 0 = greedy (default).")
]
TemperaturesOpt = Annotated[
    str | None,
    typer.Option("--temperatures", help="Comma-separated temperatures, a grid axis, e.g. 0,1 (AR baseline at each)."),
]
TopPOpt = Annotated[
    float, typer.Option("--top-p", help="At temperature > 0: keep the most likely tokens up to this mass (0 < p <= 1).")
]
TopKOpt = Annotated[int, typer.Option("--top-k", min=0, help="At temperature > 0: keep the k most likely tokens (0 = all).")]
SamplingSeedOpt = Annotated[
    int, typer.Option("--seed", min=0, help="Request r samples with the stream seeded by (seed, r): the same in every arm and rerun.")
]


