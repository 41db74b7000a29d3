"""vLLM's speculative-decoding counters: read `/metrics` (`prometheus_client`'s parser), difference two
reads, derive step rows.

vLLM exports Prometheus counters that only ever grow (per server, summed over requests):

    vllm:spec_decode_num_drafts_total                          drafts (steps that proposed ≥ 1 token)
    vllm:spec_decode_num_draft_tokens_total                    drafted tokens
    vllm:spec_decode_num_accepted_tokens_total                 accepted drafted tokens
    vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}   drafts whose token i was accepted

Reading them before and after a batch and differencing gives that batch's counts. Acceptance is a
prefix of the draft, so ``per_pos[i]`` = drafts that accepted ≥ i + 1 tokens, and the histogram of
accepted lengths per draft follows exactly:

    hist[k] = per_pos[k − 1] − per_pos[k]    (per_pos[−1] = drafts, per_pos[K] = 0)

Worked example: 10 drafts, per_pos = [6, 3, 1] → hist = [4, 3, 2, 1] (4 drafts accepted nothing,
1 accepted all three), accepted = 6 + 3 + 1 = 10.

vLLM counts per *draft*: a step that proposed nothing (n-gram without a match) is not a draft.
jfbench's τ counts every verify step, so the steps without a draft are recovered from the client's
token counts (`step_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

PREFIX = "vllm:spec_decode_"


@dataclass(frozen=True)
class SpecCounters:
    """Counter values (cumulative from one read, or the difference of two reads)."""

    drafts: int
    draft_tokens: int
    accepted: int
    per_pos: tuple[int, ...]  # (K,) drafts whose position i was accepted; K = num_speculative_tokens

    @property
    def positions(self) -> int:
        return len(self.per_pos)

    def __sub__(self, before: SpecCounters) -> SpecCounters:
        width = max(self.positions, before.positions)
        now = (*self.per_pos, *(0,) * (width - self.positions))
        then = (*before.per_pos, *(0,) * (width - before.positions))
        diff = SpecCounters(self.drafts - before.drafts, self.draft_tokens - before.draft_tokens,
                            self.accepted - before.accepted, tuple(a - b for a, b in zip(now, then, strict=True)))
        if min(diff.drafts, diff.draft_tokens, diff.accepted, *diff.per_pos, 0) < 0:
            raise ValueError("vLLM's counters went down between two reads: the server restarted")
        return diff

    def histogram(self) -> list[int]:
        """Drafts by accepted length, index k = drafts that accepted exactly k tokens (module docstring)."""
        edges = [self.drafts, *self.per_pos, 0]  # edges[k] = drafts that accepted ≥ k tokens
        hist = [edges[k] - edges[k + 1] for k in range(len(edges) - 1)]
        if min(hist, default=0) < 0 or sum(k * n for k, n in enumerate(hist)) != self.accepted:
            raise ValueError(f"inconsistent vLLM spec counters: {self}")
        return hist


EMPTY = SpecCounters(0, 0, 0, ())


def spec_counters(text: str) -> SpecCounters:
    """The spec-decode counters of one `/metrics` read, summed over label sets (engines, models).

    A server without speculative decoding exports none of them: all zero.
    """
    totals = {"num_drafts": 0.0, "num_draft_tokens": 0.0, "num_accepted_tokens": 0.0}
    per_pos: dict[int, float] = {}
    samples = (sample for family in text_string_to_metric_families(text) for sample in family.samples)
    for name, labels, value, *_ in samples:
        if not name.startswith(PREFIX) or not name.endswith("_total"):  # e.g. the `_created` timestamps
            continue
        kind = name[len(PREFIX) : -len("_total")]
        if kind in totals:
            totals[kind] += value
        elif kind == "num_accepted_tokens_per_pos":
            position = int(labels["position"])
            per_pos[position] = per_pos.get(position, 0.0) + value
    width = max(per_pos, default=-1) + 1
    return SpecCounters(int(totals["num_drafts"]), int(totals["num_draft_tokens"]),
                        int(totals["num_accepted_tokens"]), tuple(int(per_pos.get(i, 0)) for i in range(width)))


@dataclass(frozen=True)
class StepCounts:
    """One synthesised verify step: what `StepRecord` needs besides the request and times."""

    drafted: int
    accepted: int
    emitted: int


def step_rows(counters: SpecCounters, decoded_tokens: int) -> list[StepCounts]:
    """Verify steps consistent with a batch's counter differences and its decoded tokens.

    ``decoded_tokens`` = Σ over the batch's requests of (new tokens − 1): every token after the
    first (which prefill emits) comes from a verify step that emits 1 + accepted tokens, so

        steps = decoded_tokens − accepted,  steps without a draft = steps − drafts.

    The drafts come first, by accepted length (the histogram is exact); drafted tokens are spread
    as evenly as the integers allow (their sum is exact, the per-draft split is not known).
    vLLM counts acceptance before its stop rule truncates the last step, so ``accepted`` may exceed
    what was kept by up to K − 1 tokens per request; steps are then clamped at the drafts.

    Example: drafts 3, draft_tokens 9, per_pos [2, 1, 0], decoded 10 → accepted 3, steps 7:
    drafts (3, 2), (3, 1), (3, 0) and four steps without a draft, emitted 3+2+1+4 = 10.
    """
    hist = counters.histogram()
    lengths = [k for k in range(len(hist) - 1, -1, -1) for _ in range(hist[k])]  # longest first
    base, extra = divmod(counters.draft_tokens, counters.drafts) if counters.drafts else (0, 0)
    rows = [StepCounts(base + (i < extra), k, k + 1) for i, k in enumerate(lengths)]
    plain = max(0, decoded_tokens - counters.accepted - counters.drafts)
    return rows + [StepCounts(0, 0, 1)] * plain
