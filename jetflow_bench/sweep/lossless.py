"""Losslessness, checked per request against the AR baseline (docs/methodology.md, "Losslessness").

Greedy speculative decoding must reproduce plain greedy decoding token for token. A drafter arm's
output is compared with the baseline's output for the same prompt at the same batch size and
repeat; the first position where they differ is recorded. A divergence is *excused* only when it
is a floating-point near-tie of the target: at that position (context = prompt + the common
prefix) the target's logits of the baseline's token and of the drafter arm's token both lie within
``tie_eps`` of the top logit, i.e. the two top candidates differ by less than ``tie_eps``.
The logits are recomputed with one target forward, and only for diverging requests.

At temperature > 0 the criterion is the output *distribution*: speculative sampling must emit
tokens with the target's law, which the test suite checks (chi-square tests of the engine against
the target's exact law, with a power check). Requests therefore pass per se (`sampled_verdict`)
and the report says "distribution-preserving (tested)". Their `first_divergence` is still recorded
against the AR cell of the same temperature: every arm draws token t of request r with the same
uniform, so outputs usually agree token for token, and a difference marks where an fp-level
difference in the target's logits moved one draw across a CDF step — or a bug worth a look.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

NextTokenLogits = Callable[[list[int]], torch.Tensor]  # context ids -> (V,) float32 logits


@dataclass(frozen=True)
class Verdict:
    lossless: bool
    excused: bool  # a divergence at an fp near-tie (never True when lossless)
    first_divergence: int | None  # index into the generated tokens of the first difference
    tie_gap: float | None  # top logit minus the lower of the two diverging tokens' logits


def first_divergence(reference: Sequence[int], output: Sequence[int]) -> int | None:
    """Index of the first differing generated token, or None when the sequences are equal.

    Example: reference [5, 6, 7], output [5, 6, 9, 1] -> 2; reference [5, 6], output [5, 6, 7] -> 2
    (one arm stopped earlier; there is no token pair to compare at 2).
    """
    for k, (a, b) in enumerate(zip(reference, output, strict=False)):
        if a != b:
            return k
    return None if len(reference) == len(output) else min(len(reference), len(output))


def tie_gap(logits: torch.Tensor, tokens: Sequence[int]) -> float:
    """Top logit minus the lowest logit among ``tokens`` (0 when all of them are the argmax).

    Example: logits [1.0, 3.0, 2.99995], tokens (1, 2) -> 5e-5: a near-tie between tokens 1 and 2.
    """
    logits = logits.float()  # (V,)
    return float(logits.max() - logits[list(tokens)].min())


def judge(
    prompt: Sequence[int],
    reference: Sequence[int],
    output: Sequence[int],
    next_token_logits: NextTokenLogits,
    tie_eps: float,
) -> Verdict:
    """Compare one request's output with its baseline; recompute logits only if they diverge."""
    at = first_divergence(reference, output)
    if at is None:
        return Verdict(True, False, None, None)
    if at >= min(len(reference), len(output)):  # same tokens, different lengths: no tie to excuse
        return Verdict(False, False, at, None)
    logits = next_token_logits([*prompt, *reference[:at]])  # (V,)
    gap = tie_gap(logits, (reference[at], output[at]))
    return Verdict(False, gap < tie_eps, at, gap)


def sampled_verdict(reference: Sequence[int], output: Sequence[int]) -> Verdict:
    """A request decoded at temperature > 0: passes; records where it first leaves the AR output."""
    return Verdict(True, False, first_divergence(reference, output), None)
