"""Serving latency under load, defined as `vllm bench serve` defines it (docs/methodology.md).

Per request, from the time it was sent and the stamps of the chunks it received (a chunk: what
one engine step streams at once, its first token from the prefill, then each verify step's
emitted tokens):

    TTFT  = first chunk - sent                         (queueing and prefill included)
    E2EL  = last chunk - sent
    TPOT  = (E2EL - TTFT) / (output tokens - 1)        (requests of one token have none)
    ITL   = the gaps between consecutive chunks        (one per chunk after the first, not per token)

Per cell: mean / median / p90 / p99 of each (ITL pooled over every request's gaps), output
tokens/s and requests/s over the cell's wall clock (first send to last token), and goodput: the
requests per second that met every SLO given (``ttft``, ``tpot``, ``e2el``, in seconds).
Pure functions over the requests rows (`jetflow_bench.sweep.tables`); nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from jetflow_bench.core.errors import JfbenchError

LATENCIES = ("ttft", "tpot", "itl", "e2el")
STATS = {"mean": np.mean, "median": np.median, "p90": lambda a: np.percentile(a, 90), "p99": lambda a: np.percentile(a, 99)}
SLO_KEYS = ("ttft", "tpot", "e2el")
LATENCY_COLUMNS = ("sent_s", "e2el_s", "tpot_s", "itl_s")  # a load cell's requests rows add these (`ttft_s` exists)


def request_latency(sent_s: float, chunks: Sequence[tuple[float, int]]) -> dict[str, object]:
    """One request's TTFT, E2EL, TPOT (seconds) and ITL gaps from its send time and (time, tokens) chunks."""
    times = [t for t, _ in chunks]
    tokens = sum(n for _, n in chunks)
    ttft, e2el = times[0] - sent_s, times[-1] - sent_s
    tpot = (e2el - ttft) / (tokens - 1) if tokens > 1 else float("nan")
    return {"sent_s": sent_s, "ttft_s": ttft, "e2el_s": e2el, "tpot_s": tpot, "itl_s": list(np.diff(times))}


def parse_slo(text: str | None) -> dict[str, float]:
    """'ttft=0.5,tpot=0.05' -> {"ttft": 0.5, "tpot": 0.05} (seconds)."""
    slo: dict[str, float] = {}
    for part in (p.strip() for p in (text or "").split(",") if p.strip()):
        key, _, value = part.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if key.strip() not in SLO_KEYS or seconds <= 0:
            raise JfbenchError(f"--slo {text!r}: write KEY=SECONDS with KEY in {', '.join(SLO_KEYS)}, e.g. --slo ttft=0.5,tpot=0.05")
        slo[key.strip()] = seconds
    return slo


def latency_stats(requests: pd.DataFrame, wall_s: float, slo: Mapping[str, float]) -> dict[str, float]:
    """One cell's latency percentiles, throughputs and goodput (module docstring)."""
    out: dict[str, float] = {}
    for name in LATENCIES:
        if name == "itl":
            values = np.concatenate([np.asarray(v, dtype=float) for v in requests["itl_s"]] or [np.zeros(0)])
        else:
            values = requests[f"{name}_s"].to_numpy(dtype=float)
        values = values[~np.isnan(values)]
        for stat, fn in STATS.items():
            out[f"{name}_{stat}_s"] = float(fn(values)) if len(values) else float("nan")
    good = np.ones(len(requests), dtype=bool)
    for key, limit in slo.items():
        good &= requests[f"{key}_s"].to_numpy(dtype=float) <= limit  # NaN (one-token TPOT) fails
    out["output_tok_s"] = float(requests["new_tokens"].sum() / wall_s) if wall_s > 0 else float("nan")
    out["request_s"] = len(requests) / wall_s if wall_s > 0 else float("nan")
    out["goodput"] = float(good.sum() / wall_s) if slo and wall_s > 0 else float("nan")
    return out
