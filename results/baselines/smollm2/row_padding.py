"""Does padding a 2- or 3-node verify to 4 rows pay on this CPU? Times both, interleaved, in one run.

    python results/baselines/smollm2/row_padding.py --target smollm2-135m-instruct --repeats 20

The engine pads an eager batch-1 verify of 2-3 nodes to `CPU_MIN_ROWS` rows on a CPU
(jetflow_bench.engine.target). This times, round robin so that load falls on every point alike,
the same trees verified unpadded (``min_rows=1``) and as the engine runs them, beside the 1- and
4-node verifies, after a prompt of ``--context`` random tokens. Prints medians, minima and the
unpadded / padded ratio of the medians.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.projection.measure import complete_tree, interleaved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="smollm2-135m-instruct", help="target name or Hugging Face folder")
    parser.add_argument("--context", type=int, default=171, help="prompt tokens before the verified tree")
    parser.add_argument("--repeats", type=int, default=20, help="timed forwards per point")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    runner = TargetRunner.load(args.target, device="cpu")
    vocab = runner.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, vocab, (args.context,), generator=generator).tolist()
    runner.prefill([prompt], capacity=args.context + 4)
    points = [(n, rows) for n in (2, 3) for rows in (1, None)] + [(1, None), (4, None)]
    prepared = [runner.prepare([complete_tree(prompt[-1], n, vocab, generator)], min_rows=rows) for n, rows in points]
    forwards = [lambda p=p: runner.forward(p) for p in prepared]
    interleaved(forwards, runner.device, 2)  # warm-up, untimed
    samples = interleaved(forwards, runner.device, args.repeats)
    median = {point: statistics.median(s) for point, s in zip(points, samples, strict=True)}
    print(f"{args.target}, context {args.context}, {args.threads} thread(s), {args.repeats} repeats\n")
    print("| nodes | rows run | median ms | min ms |\n| --- | --- | --- | --- |")
    for (n, rows), p, s in zip(points, prepared, samples, strict=True):
        print(f"| {n} | {p.tokens.shape[1]} | {median[(n, rows)] * 1e3:.1f} | {min(s) * 1e3:.1f} |")
    for n in (2, 3):
        print(f"\n{n} nodes: unpadded / padded = {median[(n, 1)] / median[(n, None)]:.2f}x")


if __name__ == "__main__":
    main()
