"""The client side of a vLLM cell: token-id prompts to `/v1/completions`, streamed, concurrently.

One request per prompt, issued together from a thread each (concurrency = batch size), greedy,
streamed so that the client sees the first token (TTFT) and the last. Under a serving load
(`send_all`) they are sent at the load's arrival times instead, as jfbench's own engine receives
them (`jetflow_bench.sweep.load`), and every chunk's arrival is stamped. ``return_token_ids`` makes
each streamed chunk carry its token ids, so outputs compare with jfbench's token for token. vLLM
streams one chunk per engine step (prefill's first token, then 1 + accepted tokens per verify
step), unless the server fell behind and merged steps; the engine checks for that.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx

REQUEST_TIMEOUT_S = 600.0
NAN = float("nan")


class RequestFailed(RuntimeError):
    """A completion request got no complete answer (connection refused or reset, HTTP error)."""


@dataclass
class Completion:
    token_ids: list[int]
    chunks: list[int]  # tokens per streamed chunk: the first is prefill's, then one per engine step
    finish_reason: str | None  # vLLM's: stop | length | None (stream cut)
    sent: float  # perf_counter when the request was sent (under a load: its arrival time)
    first: float  # ... when the first token arrived
    last: float  # ... when the stream ended
    stamps: list[float] = field(default_factory=list)  # ... when each chunk arrived
    posted: float = NAN  # ... when it went out (under a load: once a slot was free after its arrival)


@dataclass(frozen=True)
class Sampling:
    """The request body's decoding fields (greedy; the suite's stop rule)."""

    max_tokens: int
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False  # generate exactly max_tokens (speed benchmarks)

    def body(self, model: str, prompt: Sequence[int]) -> dict:
        return {
            "model": model, "prompt": list(prompt), "max_tokens": self.max_tokens, "temperature": 0.0,
            "stop": list(self.stop), "stop_token_ids": list(self.stop_token_ids), "stream": True,
            "return_token_ids": True, "skip_special_tokens": False, "ignore_eos": self.ignore_eos,
        }


def complete(url: str, model: str, prompt: Sequence[int], sampling: Sampling,
             timeout_s: float = REQUEST_TIMEOUT_S, sent: float | None = None) -> Completion:  # fmt: skip
    """Send one streamed completion and collect its token ids; RequestFailed on any transport error.
    ``sent``: when the request arrived, if before now (it waited for a slot; the wait is its TTFT's)."""
    tokens: list[int] = []
    chunks: list[int] = []
    stamps: list[float] = []
    finish = None
    try:
        posted = time.perf_counter()
        with httpx.stream("POST", f"{url.rstrip('/')}/v1/completions", json=sampling.body(model, prompt),
                          timeout=timeout_s) as response:
            if response.status_code != 200:
                raise RequestFailed(f"HTTP {response.status_code}: {response.read().decode(errors='replace')[:300]}")
            for line in response.iter_lines():  # server-sent events: "data: {json}" per chunk
                if not line.startswith("data:"):
                    continue
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    break
                for choice in json.loads(data).get("choices", []):
                    new = choice.get("token_ids") or []
                    tokens.extend(new)
                    if new:
                        chunks.append(len(new))
                        stamps.append(time.perf_counter())
                    finish = choice.get("finish_reason") or finish
        last = time.perf_counter()
    except (httpx.HTTPError, json.JSONDecodeError) as err:
        raise RequestFailed(f"{type(err).__name__}: {err}") from err
    if finish is None:
        raise RequestFailed("the stream ended without a finish reason (server gone?)")
    return Completion(tokens, chunks, finish, posted if sent is None else sent, stamps[0] if stamps else last,
                      last, stamps, posted)


def complete_all(url: str, model: str, prompts: Sequence[Sequence[int]], sampling: Sampling) -> list[Completion]:
    """All prompts at once, one thread each (concurrency = len(prompts)); results in prompt order."""
    return send_all(url, model, prompts, sampling, None, max(1, len(prompts)), time.perf_counter())


def send_all(url: str, model: str, prompts: Sequence[Sequence[int]], sampling: Sampling,
             arrivals: Sequence[float] | None, max_concurrency: int, start: float) -> list[Completion]:  # fmt: skip
    """Serve ``prompts`` as requests arriving over time, ``max_concurrency`` in flight at most:
    open loop (``arrivals``: seconds after ``start``, a perf_counter time) sends request i at
    ``start + arrivals[i]``, and one that finds every slot taken waits, its wait counted in its TTFT
    (``sent`` is its arrival); closed loop (``arrivals`` None) sends the next request when one ends.
    Results in prompt order; the first failure is raised once every request has ended."""
    futures: list[Future[Completion]] = []
    with ThreadPoolExecutor(max_workers=max_concurrency) as pool:  # its workers are the slots
        for i, prompt in enumerate(prompts):
            due = None if arrivals is None else start + arrivals[i]
            if due is not None:
                time.sleep(max(0.0, due - time.perf_counter()))
            futures.append(pool.submit(complete, url, model, prompt, sampling, REQUEST_TIMEOUT_S, due))
    return [f.result() for f in futures]
