"""`jfbench bench kernels`: the attention backends on tree-verification shapes, timed and checked."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from jetflow_bench.cli.bench_cmd import _int_list, bench_app
from jetflow_bench.cli.options import DeviceOpt, DtypeOpt
from jetflow_bench.cli.output import TableFormat, TableFormatOpt, emit
from jetflow_bench.core.errors import JfbenchError

DEFAULT_BACKENDS = "sdpa,triton,flex"
CPU_NOTE = (
    "CPU: Triton ran in its interpreter and FlexAttention eagerly, so timings are meaningless and not reported; "
    "only max |err| counts here. Time kernels on a GPU (scripts/gpu_check.sh)."
)


@bench_app.command("kernels")
def kernels(
    tree_sizes: Annotated[str, typer.Option(help="Comma-separated tree sizes N (nodes incl. the root).")] = "16,64,256",
    prefix_lens: Annotated[str, typer.Option(help="Comma-separated committed prefix lengths L (the longest row).")] = "128,1024,4096",
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated batch sizes.")] = "1,8",
    backends: Annotated[
        str, typer.Option(help="Comma-separated backends; sdpa is the reference. The default skips those that cannot run.")
    ] = DEFAULT_BACKENDS,
    heads: Annotated[
        str, typer.Option(help="Query heads, KV heads, head dim. Default: Qwen3-8B's (32,8,128); CPU default 8,2,64.")
    ] = "",
    repeats: Annotated[int, typer.Option(min=1, help="Timed calls per backend (median reported).")] = 20,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the random trees, prefixes and q/k/v.")] = 0,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    fmt: TableFormatOpt = TableFormat.table,
) -> None:
    """Time every attention backend on random trees after ragged prefixes; check each against SDPA.

    Each row: median ms of one attention call (one layer), the once-per-forward cost of the backend's
    mask form (dense additive mask / packed bits / FlexAttention block mask), and the max |error|
    against SDPA in fp32 on the same inputs. On a CPU Triton runs in its interpreter (start the
    command with TRITON_INTERPRET=1 set) and the table reports correctness only.

    Examples:

        jfbench bench kernels --device cuda --dtype bfloat16

        TRITON_INTERPRET=1 jfbench bench kernels --tree-sizes 16,64 --prefix-lens 128 --batch-sizes 1
    """
    sizes, prefixes, batches = (_int_list(tree_sizes, "--tree-sizes"), _int_list(prefix_lens, "--prefix-lens"),
                                _int_list(batch_sizes, "--batch-sizes"))
    names = [n.strip() for n in backends.split(",") if n.strip()]
    from jetflow_bench.core.runtime import resolve_device, resolve_dtype

    dev = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, dev)
    head_shape = tuple(_int_list(heads or ("8,2,64" if dev.type == "cpu" else "32,8,128"), "--heads"))
    if len(head_shape) != 3 or head_shape[0] % head_shape[1]:
        raise JfbenchError(f"--heads {heads!r}: give Q_HEADS,KV_HEADS,HEAD_DIM with Q_HEADS a multiple of KV_HEADS")

    from jetflow_bench.bench.kernels import run_case
    from jetflow_bench.engine.attention import get_attention

    for name in list(names):
        try:
            get_attention(name, dev)  # unknown or unavailable backends fail before any work
        except JfbenchError as err:
            if backends != DEFAULT_BACKENDS or name == "sdpa":
                raise
            names.remove(name)  # the default list runs what this machine can
            print(f"note: skipping {name}: {err}", file=sys.stderr)
    on_cpu = dev.type == "cpu"
    rows = [
        row
        for batch in batches
        for size in sizes
        for prefix in prefixes
        for row in run_case(batch, size, prefix, names, head_shape, torch_dtype, dev, 1 if on_cpu else repeats, seed)
    ]
    emit([{
        "batch": r.batch, "tree": r.tree, "prefix": r.prefix, "backend": r.backend,
        "ms": None if on_cpu else round(r.ms, 4),  # interpreter timings mean nothing: not reported
        "prep_ms": None if on_cpu else round(r.prep_ms, 4), "max_err": float(f"{r.max_err:.3g}"),
    } for r in rows], fmt, left=("backend",),
        title=f"tree attention — {dev}, {str(torch_dtype).removeprefix('torch.')}, heads (q, kv, dim) {head_shape}",
        caption="ms: median of one call (one layer); prep_ms: the mask form, once per forward; "
                "max_err: max |out - sdpa fp32| over real nodes")
    if on_cpu:
        print(CPU_NOTE, file=sys.stderr)
