"""Attention kernels for tree verification and the draft heads (see docs/kernels.md).

* ``mask`` — `TreeMask`, the structural mask every backend receives;
* ``triton_tree`` — the Triton tree-attention kernel;
* ``flex`` — the FlexAttention backend.

`jfbench bench kernels` (`jetflow_bench.bench.kernels`) times every backend against SDPA on one device.

This module imports neither Triton nor the kernels; ``require_backend`` checks that a backend can
run before anything loads it.
"""

from __future__ import annotations

import importlib.util
import os

import torch

from jetflow_bench.core.errors import JfbenchError


def require_backend(name: str, device: torch.device) -> None:
    """Raise a one-line `JfbenchError` naming the fix when backend ``name`` cannot run on ``device``."""
    if name == "triton":
        try:
            import triton  # noqa: F401
        except ImportError:
            raise JfbenchError(
                "--attention triton needs the triton package: `pip install triton` (or use --attention sdpa)"
            ) from None
        if device.type == "cpu" and not _interpreter_loaded():
            raise JfbenchError(
                "--attention triton on a CPU runs only in Triton's interpreter: set TRITON_INTERPRET=1 before "
                "starting jfbench (slow; for correctness checks), or use --attention sdpa"
            )
        if device.type not in ("cpu", "cuda"):
            raise JfbenchError(f"--attention triton runs on cuda (or cpu in the interpreter), not {device.type}")
    elif name == "flex" and importlib.util.find_spec("torch.nn.attention.flex_attention") is None:
        raise JfbenchError(
            f"--attention flex needs torch.nn.attention.flex_attention (torch >= 2.5; this is {torch.__version__}): "
            "upgrade torch or use --attention sdpa"
        )


def _interpreter_loaded() -> bool:
    """TRITON_INTERPRET=1 was in effect when Triton loaded (``import torch`` loads it, so setting the
    variable later leaves Triton's own library compiled-only and the kernels would fail)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.max, InterpretedFunction)
