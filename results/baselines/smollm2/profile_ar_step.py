"""Where does one plain-decoding step of jfbench's engine spend its time? torch.profiler over a decode.

    python results/baselines/smollm2/profile_ar_step.py --target smollm2-135m-instruct --threads 1

Decodes one GSM8K prompt greedily under torch.profiler twice, with ``--tokens`` new tokens and with
one (the prefill alone), and prints the difference per decode step: operators by self CPU time,
beside the bytes of weights one step must read (what a memory-bound step streams), so the gap to
vLLM's plain decoding can be attributed to the matmuls, attention or the rest (framework and
Python overhead between the kernels).
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

from jetflow_bench.core.runtime import data_dir
from jetflow_bench.engine.loop import generate
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.sweep.prompts import encode, suite_requests


def op_times(runner: TargetRunner, prompt: list[int], tokens: int) -> dict[str, tuple[int, float]]:
    """(calls, self CPU µs) per operator over one decode of ``tokens`` new tokens, prefill included."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        generate(runner, [prompt], StopRule(max_new_tokens=tokens))
    return {e.key: (e.count, e.self_cpu_time_total) for e in prof.key_averages()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="smollm2-135m-instruct", help="target name or Hugging Face folder")
    parser.add_argument("--tokens", type=int, default=17, help="new tokens decoded under the profiler")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--rows", type=int, default=12, help="operators listed")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    runner = TargetRunner.load(args.target, device="cpu")
    prompt = encode(runner, suite_requests(runner, "gsm8k", data_dir(), limit=1)[0].prompt)
    generate(runner, [prompt], StopRule(max_new_tokens=4))  # warm-up
    steps = args.tokens - 1
    full, prefill = op_times(runner, prompt, args.tokens), op_times(runner, prompt, 1)  # prefill alone: 1 token
    per_step = {k: ((c - prefill.get(k, (0, 0))[0]) / steps, (us - prefill.get(k, (0, 0))[1]) / steps / 1e3)
                for k, (c, us) in full.items()}
    total = sum(ms for _, ms in per_step.values())
    tied = runner.model.config.tie_word_embeddings
    weights = sum(p.numel() * p.element_size() for p in runner.model.parameters())  # tied: the head is the table
    print(f"{runner.name}, {args.threads} thread(s): {steps} decode steps, {total:.1f} ms of operator self time per "
          f"step; weights read per step {weights / 1e6:.0f} MB (tied embeddings: {tied})")
    print("\n| operator | calls per step | self ms per step | share |\n| --- | --- | --- | --- |")
    for key, (calls, ms) in sorted(per_step.items(), key=lambda kv: kv[1][1], reverse=True)[: args.rows]:
        print(f"| `{key}` | {calls:.0f} | {ms:.2f} | {ms / total:.0%} |")


if __name__ == "__main__":
    main()
