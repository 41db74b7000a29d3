"""`jfbench export`: hand a draft head to a serving engine in the layout it loads."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from jetflow_bench.cli import app


@app.command("export")
def export(
    head: Annotated[Path, typer.Argument(help="Head folder: made by `jfbench train`, or a released DFlash / JetSpec / EAGLE-3 head.")],
    fmt: Annotated[str, typer.Option("--format", help="dflash (block heads: dflash, jetflow) or eagle3 (EAGLE-3 heads).")],
    out: Annotated[Path, typer.Option("--out", help="Folder to write (created; files in it are replaced).")],
) -> None:
    """Write a draft head as the folder vLLM's speculative decoding loads; print the folder.

    The head keeps the target's embedding and LM head (vLLM shares them with the target), so serve it
    with the target it was trained for. For a block head, set num_speculative_tokens to the head's
    block size - 1: vLLM drafts one block of 1 + num_speculative_tokens positions.

    Examples:

        jfbench export heads/dflash --format dflash --out served/dflash
        vllm serve TARGET --speculative-config '{"method": "dflash", "model": "served/dflash", "num_speculative_tokens": 15}'

        jfbench export specforge-out/epoch_9 --format eagle3 --out served/eagle3
        vllm serve TARGET --speculative-config '{"method": "eagle3", "model": "served/eagle3", "num_speculative_tokens": 5}'
    """
    from drafters import export_head

    typer.echo(str(export_head(head, fmt, out)))
