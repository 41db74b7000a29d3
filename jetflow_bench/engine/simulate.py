"""Greedy speculative decoding simulated from the known output, without the target's tree verification.

Greedy speculative decoding emits the plain decoder's tokens (losslessness), so once a request's
output is known a step's acceptance needs no target: the deepest node of the drafter's tree whose
root path spells the next output tokens (`tree.matched_nodes`), plus the bonus, cut at
the output's end. The drafter runs live at every step and is fed, as the engine feeds it, the
target's tapped features of the tokens newly committed, taken from one teacher-forced forward over
prompt + output. So the simulation visits the positions a run at that budget visits (the headroom
replay reuses another budget's) and gives each request the engine's step count, fp ties aside;
tests/engine/test_simulate.py holds it equal for every drafter family.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from jetflow_bench.engine.drafter import Drafter, SequenceView
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.engine.tree import emitted, matched_nodes


def simulated_steps(target: TargetRunner, drafter: Drafter, prompts: Sequence[Sequence[int]],
                    outputs: Sequence[Sequence[int]], budget: int) -> list[int]:
    """Verify steps per request at ``budget`` when each step accepts what the known ``outputs`` (the
    generated ids, prefill's token first) allow. One batch: the target scores every prompt + output."""
    with torch.inference_mode():
        full = [list(p) + list(o) for p, o in zip(prompts, outputs, strict=True)]
        hidden = target.score(full, taps=drafter.taps).hidden  # (B, N, K, H), None without taps
        seqs = [SequenceView(i, [*p, o[0]], len(p)) for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))]
        drafter.reset(seqs)
        drafter.observe(seqs, None if hidden is None else [hidden[i, : len(p)] for i, p in enumerate(prompts)])
        steps = [0] * len(seqs)
        active = [i for i, o in enumerate(outputs) if len(o) > 1]
        while active:
            trees = drafter.propose([seqs[i] for i in active], budget)
            keep, features = [], []
            for i, tree in zip(active, trees, strict=True):
                seq = seqs[i]
                continuation = outputs[i][len(seq.tokens) - seq.prompt_len :]
                n = emitted(len(matched_nodes(tree, continuation)), len(continuation))
                before = len(seq.tokens)
                seq.tokens.extend(continuation[:n])
                steps[i] += 1
                if len(seq.tokens) - seq.prompt_len < len(outputs[i]):
                    keep.append(i)
                    if hidden is not None:  # the root and the accepted nodes, as the engine's verify wrote them
                        features.append(hidden[i, before - 1 : before - 1 + n])
            active = keep
            if keep:
                drafter.observe([seqs[i] for i in keep], features if hidden is not None else None)
    return steps
