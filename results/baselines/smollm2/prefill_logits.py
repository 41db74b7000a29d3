"""What does the LM head over every prompt token add to a prefill? Times both, interleaved, in one run.

    python results/baselines/smollm2/prefill_logits.py --target smollm2-135m-instruct --repeats 10

`TargetRunner.prefill` scores each prompt's last token only (decoding needs no other logits);
`TargetRunner.score` runs the same chains through the same layers and scores every token, as the
prefill did before. This times both, round robin, on the first GSM8K prompts at batch 1 and 4 and
prints medians and the ratio, so the cost the change removed from every arm's time to first token
(and from `bench baseline`'s timed pairs, which include the prefill) is a measured number.
"""

from __future__ import annotations

import argparse
import statistics

import torch

from jetflow_bench.core.runtime import data_dir
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.projection.measure import interleaved
from jetflow_bench.sweep.prompts import encode, suite_requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="smollm2-135m-instruct", help="target name or Hugging Face folder")
    parser.add_argument("--suite", default="gsm8k", help="suite whose first prompts are prefilled")
    parser.add_argument("--repeats", type=int, default=10, help="timed prefills per point")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    runner = TargetRunner.load(args.target, device="cpu")
    requests = suite_requests(runner, args.suite, data_dir(), limit=4)
    prompts = [encode(runner, r.prompt) for r in requests]
    print(f"{args.target}, {args.suite} prompts of {[len(p) for p in prompts]} tokens, "
          f"{args.threads} thread(s), {args.repeats} repeats\n")
    print("| batch | last token's logits, median ms | every token's, median ms | every / last |\n| --- | --- | --- | --- |")
    for batch in (prompts[:1], prompts):
        capacity = max(map(len, batch))

        def last(batch=batch, capacity=capacity) -> None:
            runner.prefill(batch, capacity)
            runner.release()

        fns = [last, lambda batch=batch: runner.score(batch)]
        interleaved(fns, runner.device, 1)  # warm-up, untimed
        last_s, every_s = (statistics.median(s) for s in interleaved(fns, runner.device, args.repeats))
        print(f"| {len(batch)} | {last_s * 1e3:.0f} | {every_s * 1e3:.0f} | {every_s / last_s:.2f}x |")


if __name__ == "__main__":
    main()
