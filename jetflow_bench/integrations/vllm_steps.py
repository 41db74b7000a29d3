"""A vLLM prompt batch as jfbench rows: outputs cut by jfbench's stop rule, and verify-step rows.

vLLM streams one chunk per engine step (prefill's first token, then 1 + accepted tokens per verify
step), so each request's chunks are its steps (`streamed_steps`), and the batch's `/metrics`
counter differences add what the stream cannot show (drafted tokens, drafts that accepted
nothing). A server that fell behind merges steps into one chunk; the counters expose that (more
accepted tokens than they count), and the batch's rows are then rebuilt from the counters alone
(`vllm_metrics.step_rows`), split over its requests (`_assign`). The step times (draft, verify,
other) are not observable from outside vLLM and are NaN. Under a serving load each request's
chunk stamps become its timeline (`request_timelines`), read as jfbench's own engine's are.
"""

from __future__ import annotations

from collections.abc import Sequence

from jetflow_bench.engine.loop import BatchResult, RequestResult, StepRecord
from jetflow_bench.engine.serving import RequestTimeline
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.integrations.vllm_client import Completion
from jetflow_bench.integrations.vllm_metrics import SpecCounters, StepCounts, step_rows

NAN = float("nan")


def batch_result(prompts: Sequence[Sequence[int]], completions: list[Completion], stop: StopRule, budget: int,
                  counters: SpecCounters, start: float) -> BatchResult:  # fmt: skip
    """Requests truncated by jfbench's own stop rule, and their step rows.

    Steps come from the stream when it is one chunk per engine step (`streamed_steps`), else they
    are synthesised from the counters and split over the batch's requests (`step_rows`, `_assign`).
    """
    results = []
    for i, (prompt, done) in enumerate(zip(prompts, completions, strict=True)):
        end = stop.find_end(done.token_ids, 0)
        n, reason = end if end is not None else (len(done.token_ids), done.finish_reason or "length")
        results.append(RequestResult(i, list(prompt), done.token_ids[:n], reason, done.first - done.sent,
                                     done.last - done.first, 0))
    emitted = [_cut(done.chunks, len(r.output_tokens)) for done, r in zip(completions, results, strict=True)]
    steps = streamed_steps(emitted, counters, budget)
    if steps is None:
        decoded = [max(0, len(r.output_tokens) - 1) for r in results]
        steps = _assign(step_rows(counters, sum(decoded)), decoded, budget, len(prompts))
    for result in results:
        result.steps = sum(1 for s in steps if s.request == result.request)
    wall = max(d.last for d in completions) - start
    return BatchResult(results, steps, wall_s=wall)


def request_timelines(completions: list[Completion], results: list[RequestResult],
                      start: float) -> list[RequestTimeline]:  # fmt: skip
    """Each request's send time and chunk stamps in seconds after ``start`` (a perf_counter time), its
    chunks cut to the tokens jfbench's stop rule kept (``results``, `batch_result`'s), so that TTFT,
    TPOT, ITL and E2EL (`measure.serving`) cover the same tokens as the request's output. A request
    joined running ones when it went out while another's stream was open."""
    timelines = []
    for i, (done, result) in enumerate(zip(completions, results, strict=True)):
        kept = _cut(done.chunks, len(result.output_tokens))
        chunks = [(t - start, n) for t, n in zip(done.stamps, kept, strict=False)] or [(done.first - start, 0)]
        joined = any(other.posted < done.posted < other.last for other in completions if other is not done)
        timelines.append(RequestTimeline(i, done.sent - start, done.posted - start, joined, chunks))
    return timelines


def _cut(chunks: list[int], kept: int) -> list[int]:
    """Chunk sizes of the first ``kept`` tokens. Example: [1, 3, 2], kept 3 → [1, 2]."""
    out, total = [], 0
    for size in chunks:
        if total >= kept:
            break
        out.append(min(size, kept - total))
        total += out[-1]
    return out


def streamed_steps(emitted: list[list[int]], counters: SpecCounters, budget: int) -> list[StepRecord] | None:
    """Step rows per request from its stream: chunk k ≥ 1 is verify step k − 1, emitting 1 + accepted.

    ``emitted[r]`` = tokens per streamed chunk of request r, after jfbench's stop rule. Drafted
    tokens are known only per batch (the counters): each step that accepted a tokens is a draft of
    at least a tokens; the drafts that accepted nothing go to one-token steps, spread evenly; the
    rest of the drafted tokens are spread evenly over the drafts (none over B − 1; `spread`). A
    request's last step, cut by the stop rule, is counted as bonus + accepted, so it may count one
    accepted token too few.

    Returns None when the stream cannot be one chunk per step: a first chunk of more than one
    token, more accepted tokens than the counters' (merged chunks), or more one-token steps that
    must hold a rejected draft than there are.
    Example: emitted [[1, 1, 3, 1]] (prefill, then three steps), counters drafts 2, draft_tokens 6,
    accepted 2 → accepted per step [0, 2, 0]; the drafts are the step that accepted 2 and one of
    the two one-token steps (the first); 6 − 2 = 4 spare drafted tokens, 2 each → steps
    (drafted, accepted) = (2, 0), (4, 2), (0, 0).
    """
    if any(chunks and chunks[0] != 1 for chunks in emitted):
        return None
    accepted = [[e - 1 for e in chunks[1:]] for chunks in emitted]
    total = sum(map(sum, accepted))
    hits = sum(1 for row in accepted for a in row if a > 0)
    misses = counters.drafts - hits  # drafts that accepted nothing
    ones = sum(1 for row in accepted for a in row if a == 0)
    if total > counters.accepted or misses < 0 or misses > ones or counters.draft_tokens < total:
        return None
    # Which one-token steps held a rejected draft is not observable: every (ones / misses)-th one.
    chosen = {round((j + 0.5) * ones / misses - 0.5) for j in range(misses)} if misses else set()
    flat = [(r, step, a) for r, row in enumerate(accepted) for step, a in enumerate(row)]
    drafts, one = [], 0
    for *_, a in flat:
        if a > 0 or one in chosen:
            drafts.append(a)
        one += a == 0
    extra = spread(counters.draft_tokens - total, [budget - 1 - a for a in drafts])
    if extra is None:
        return None
    drafted = iter(a + e for a, e in zip(drafts, extra, strict=True))
    records, one = [], 0
    for r, step, a in flat:
        is_draft = a > 0 or one in chosen
        one += a == 0
        size = next(drafted) if is_draft else 0
        records.append(_record(r, step, len(emitted), budget, size, a, a, a + 1))
    _add_raw(records, counters.accepted - total)
    return records


def _record(request: int, step: int, active: int, budget: int, drafted: int, accepted: int, accepted_raw: int,
            emitted: int) -> StepRecord:  # fmt: skip
    """A vLLM step row; what is not observable from outside vLLM (times, FLOPs, draft passes) is NaN / 0."""
    return StepRecord(
        request=request, step=step, batch_step=step, active=active, budget=budget, drafted=drafted,
        accepted=accepted, accepted_raw=accepted_raw, emitted=emitted, depth=drafted, draft_passes=0,
        draft_entries=0, draft_flops=NAN, verify_flops=NAN, draft_s=NAN, verify_s=NAN, other_s=NAN,
        timing="none",
    )


def _add_raw(records: list[StepRecord], excess: int) -> None:
    """Put the accepted tokens vLLM counted but the stop rule cut (``excess``) on each request's last
    step, as far as its draft holds them: the stop rule only ever cuts a request's last step."""
    last = {r.request: r for r in records}  # each request's last step
    for record in last.values():
        room = min(excess, record.drafted - record.accepted_raw)
        if room > 0:
            record.accepted_raw += room
            excess -= room


def spread(total: int, caps: list[int]) -> list[int] | None:
    """``total`` split into len(caps) non-negative parts, part i ≤ caps[i], as evenly as the caps
    allow (water-filling); None when the caps hold less than ``total``.
    Example: spread(7, [1, 4, 4]) → [1, 3, 3]; spread(2, [0, 0]) → None.
    """
    if total < 0 or sum(max(c, 0) for c in caps) < total:
        return None
    parts = [0] * len(caps)
    left = total
    order = sorted(range(len(caps)), key=lambda i: caps[i])
    for k, i in enumerate(order):
        share = -(-left // (len(order) - k))  # ceil: the larger shares go to the larger caps
        parts[i] = min(max(caps[i], 0), share)
        left -= parts[i]
    return parts


def _assign(rows: list[StepCounts], decoded: list[int], budget: int, active: int) -> list[StepRecord]:
    """Give each synthesised step to a request so that each request's emitted tokens add up to its own.

    Longest drafts first, each to the request with the most tokens still unaccounted for; a step
    that no longer fits is cut to what is left (as the stop rule cut it: the kept tokens are all
    accepted drafted ones). Exact at batch size 1.
    Example: decoded [5, 2], rows emitting 3, 2, 1, 1 → 3 to r0 (left 2, 2), 2 to r0 (the first of
    the tie; left 0, 2), 1 to r1, 1 to r1.
    """
    left = list(decoded)
    count = [0] * len(decoded)
    records = []
    for row in rows:
        r = max(range(len(left)), key=lambda i: left[i])
        if left[r] <= 0:
            break
        emitted = min(row.emitted, left[r])
        accepted = min(row.accepted, emitted)
        left[r] -= emitted
        records.append(_record(r, count[r], active, budget, row.drafted, accepted, row.accepted, emitted))
        count[r] += 1
    return records
