"""Greedy speculative decoding simulated from the known output, without the target's tree verification.

Greedy speculative decoding emits the plain decoder's tokens (losslessness), so once a request's
output is known a step's acceptance needs no target: the deepest node of the drafter's tree whose
root path spells the next output tokens (`tree.matched_nodes`), plus the bonus, cut at the
output's end. The drafter runs live at every step and is fed, as the engine feeds it, the target's
tapped features of the tokens newly committed, taken from one teacher-forced forward over prompt +
output. So the simulation visits the positions a run at that budget visits (the headroom replay
reuses another budget's) and gives each request the engine's step count, fp ties aside;
tests/engine/test_simulate.py holds it equal for every drafter family.

The records are the engine's (`StepMeter`), less what needs the verify forward or a clock: no
times (timing "none"), no top-branch gap (`rank1_gap` NaN), and a step cut at the output's end
knows only the output: its `accepted_raw`, accepted path (`NodeBlock`) and ranked tokens stop there,
with no bonus. The sweep's ``sim`` engine (`jetflow_bench.sweep.sim_engine`) runs its
drafter cells this way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from jetflow_bench.engine.acceptance import Acceptance
from jetflow_bench.engine.drafter import Drafter, SequenceView
from jetflow_bench.engine.loop import BatchResult, RequestResult, batch_result_of, check_trees, draft_trees
from jetflow_bench.engine.meter import Clock, StepMeter
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.engine.tree import emitted, matched_nodes


def simulate(target: TargetRunner, drafter: Drafter, references: Sequence[RequestResult], budget: int) -> BatchResult:
    """The batch ``references`` (plain decoding's results, in batch order) decoded at ``budget`` by
    ``drafter``, each step accepting what the known output allows. One teacher-forced forward
    scores every prompt + output; the target's logits are not computed."""
    prompts = [r.prompt_tokens for r in references]
    outputs = [r.output_tokens for r in references]
    meter = StepMeter(Clock(target.device, split=False), drafter, None, target.shape, timed=False)
    seqs = [SequenceView(i, [*p, o[0]], len(p)) for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))]
    steps = [0] * len(seqs)
    with torch.inference_mode():
        full = [list(p) + list(o) for p, o in zip(prompts, outputs, strict=True)]
        hidden = target.score(full, taps=drafter.taps, logits=False).hidden  # (B, N, K, H), None without taps
        drafter.reset(seqs)
        drafter.observe(seqs, None if hidden is None else [hidden[i, : len(p)] for i, p in enumerate(prompts)])
        drafter.take_cost(len(seqs))  # the prompt's features belong to prefill, as in the engine
        active = [i for i, o in enumerate(outputs) if len(o) > 1]
        while active:
            views = [seqs[i] for i in active]
            meter.begin(budget)
            trees, drafting = draft_trees(drafter, views, budget)
            meter.drafted(trees, drafting)
            check_trees(trees, views, budget, drafter)
            meter.prepared()
            meter.verified()
            before = [len(v.tokens) for v in views]
            paths, bonus, keep, features = [], [], [], []
            for i, seq, tree in zip(active, views, trees, strict=True):
                continuation = outputs[i][len(seq.tokens) - seq.prompt_len :]
                path = [0, *matched_nodes(tree, continuation)]
                n = emitted(len(path) - 1, len(continuation))
                paths.append(path)
                bonus.append(continuation[len(path) - 1] if n == len(path) else None)  # None: cut at the output's end
                seq.tokens.extend(continuation[:n])
                steps[i] += 1
                if len(seq.tokens) - seq.prompt_len < len(outputs[i]):
                    keep.append(i)
                    if hidden is not None:  # the root and the accepted nodes, as the engine's verify wrote them
                        features.append(hidden[i, len(seq.tokens) - n - 1 : len(seq.tokens) - 1])
            meter.committed(views, before)
            if keep:
                drafter.observe([seqs[i] for i in keep], features if hidden is not None else None)
            acc = Acceptance([p[-1] for p in paths], [len(p) - 1 for p in paths], bonus, paths)
            meter.finish(active, steps, before, trees, acc, None)
            active = keep
    results = [RequestResult(i, list(r.prompt_tokens), list(r.output_tokens), r.finish_reason, math.nan, math.nan, steps[i])
               for i, r in enumerate(references)]
    return batch_result_of(results, meter, math.nan)

