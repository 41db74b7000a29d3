"""How close the engine's plain step is to what the hardware allows: every run's efficiency figure.

On an engine bound by per-layer host work (Python, kernel launches) a verify of 256 nodes costs
about what a 1-token step costs, so every speculative arm's speed-up is inflated by construction
(a compiled server would see less). The figure that shows it: the plain (AR) step at batch 1,
measured on the run's own engine, against its roofline — the larger of the weight bytes one step
reads over the device's measured copy bandwidth and the step's FLOPs over its measured matmul
peak. A ratio near 1 is an engine as fast as the hardware; past `OVERHEAD_BOUND` the run's
speed-ups are labelled (`efficiency_line`).
"""

from __future__ import annotations

import statistics
from typing import Any

OVERHEAD_BOUND = 2.0  # plain step / roofline above which speed-ups are labelled overhead-bound
CONTEXT = 256  # committed tokens while the plain step is timed
REPEATS = 10


def engine_efficiency(engine: Any) -> dict[str, Any] | None:
    """The manifest's ``engine_efficiency`` for a sweep's engine; None for an engine this process
    does not run (a vLLM server: its steps are not ours to time)."""
    from jetflow_bench.engine.target import TargetRunner

    target = getattr(engine, "target", None)
    return measure_efficiency(target) if isinstance(target, TargetRunner) else None


def measure_efficiency(runner, context: int = CONTEXT, repeats: int = REPEATS) -> dict[str, Any]:
    """Time ``runner``'s plain step (batch 1, ``context`` committed tokens; compiled first when the
    runner is, untimed) and price its roofline on the same device."""
    import torch

    from jetflow_bench.engine.tree import DraftTree
    from jetflow_bench.projection.measure import copy_bandwidth, interleaved

    prompt = torch.randint(0, runner.config.vocab_size, (1, context), generator=torch.Generator().manual_seed(0)).tolist()
    capacity = context + runner.tree_width(1)
    runner.warm_up(1, 1, capacity)
    runner.prefill(prompt, capacity)
    try:  # nothing is committed: every timed step rewrites the same slot
        root = [DraftTree.root_only(prompt[0][-1])]
        step = [lambda: runner.forward(runner.prepare(root))]
        interleaved(step, runner.device, 2)  # warm-up, untimed
        step_s = statistics.median(interleaved(step, runner.device, repeats)[0])
    finally:
        runner.release()
    embed, head = runner.embed.weight, runner.lm_head.weight
    # One step reads every weight once, except the embedding table (one row) unless the LM head is it.
    weight_bytes = sum(p.numel() * p.element_size() for p in runner.model.parameters())
    weight_bytes -= 0 if embed is head else embed.numel() * embed.element_size()
    flops = runner.shape.forward_flops(1, context + 1)
    bandwidth = copy_bandwidth(runner.device, 5)
    peak = matmul_peak(runner.device, runner.dtype)
    memory_s, compute_s = weight_bytes / bandwidth, flops / peak
    roofline_s = max(memory_s, compute_s)
    return {
        "device": str(runner.device), "dtype": str(runner.dtype).removeprefix("torch."),
        "compile": runner.compile_mode, "context": context, "plain_step_ms": 1e3 * step_s,
        "roofline_ms": 1e3 * roofline_s, "ratio": step_s / roofline_s,
        "bound": "memory" if memory_s >= compute_s else "compute",
        "weight_bytes": weight_bytes, "bandwidth_gb_s": bandwidth / 1e9, "flops": flops, "peak_gflop_s": peak / 1e9,
    }


def matmul_peak(device, dtype) -> float:
    """FLOP/s of a square matmul in ``dtype`` (the median of 5), the compute side of the roofline."""
    import torch

    from jetflow_bench.projection.measure import interleaved

    n = 4096 if device.type == "cuda" else 512  # a CPU: a few ms per product, not seconds per sweep
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    run = [lambda: a @ b]
    interleaved(run, device, 1)
    return 2 * n**3 / statistics.median(interleaved(run, device, 5)[0])


def efficiency_line(eff: dict[str, Any] | None) -> str | None:
    """The caption line of a run's efficiency (None when it was not measured), with the
    overhead-bound label and the flag that fixes it past `OVERHEAD_BOUND`."""
    if not eff:
        return None
    line = (f"engine efficiency: plain step {eff['plain_step_ms']:.2f} ms vs its {eff['bound']} roofline "
            f"{eff['roofline_ms']:.2f} ms ({eff['ratio']:.1f}x; {eff['weight_bytes'] / 1e6:.1f} MB of weights at "
            f"{eff['bandwidth_gb_s']:.1f} GB/s, {eff['peak_gflop_s']:.0f} GFLOP/s peak, {eff['device']})")
    if eff["ratio"] < 1:  # e.g. a toy model on a CPU: its weights stay in a cache faster than the copy probe's memory
        return f"{line}; under 1x: the weights fit a cache faster than the measured bandwidth, so this roofline does not bind"
    if eff["ratio"] <= OVERHEAD_BOUND:
        return line
    fix = "--graphs" if eff["device"].startswith("cuda") else "--compile"
    used = {"inductor": "--compile", "graphs": "--graphs"}.get(eff.get("compile"))
    remedy = f"even under {used}" if used == fix else f"rerun with {fix}"
    return f"{line}\noverhead-bound engine: speed-ups overstate what a compiled server would see ({remedy})"
