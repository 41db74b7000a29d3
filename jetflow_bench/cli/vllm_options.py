"""The flags that say where `sweep --engine vllm` finds vLLM (`VLLMOptions.resolve` reads them)."""

from __future__ import annotations

from typing import Annotated

import typer

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
VLLMServersOpt = Annotated[
    int, typer.Option("--vllm-servers", min=1, help="Managed servers kept running at once, one per vLLM arm × budget, "
                      "the least recently used stopped first. Above 1, a load sweep that alternates vLLM arms starts "
                      "each server once instead of once per serving run; each idle server holds its memory.")
]
VLLMArgsOpt = Annotated[
    str | None,
    typer.Option("--vllm-args", help="Managed servers: extra `vllm serve` flags in one string, e.g. '--enforce-eager'."),
]
TPOpt = Annotated[int, typer.Option("--tensor-parallel-size", min=1, help="Managed vLLM servers: GPUs per replica.")]
PPOpt = Annotated[int, typer.Option("--pipeline-parallel-size", min=1, help="Managed vLLM servers: pipeline stages.")]
