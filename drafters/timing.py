"""Opt-in split of drafting time (`jfbench bench drafter`): labelled spans with device syncs.

Drafters mark their non-forward work with ``with span("tree"):``. Nothing is timed (and nothing
synchronises) unless a `SplitTimer` is active, so the spans cost one global lookup in normal runs.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Iterator

import torch

from jetflow_bench.runtime import synchronize


class SplitTimer:
    """Seconds per label, summed; every span waits for queued device work before reading the clock.

    Spans of different labels may nest (a "head" span inside a "draft" span counts in both).
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds: dict[str, float] = defaultdict(float)
        self._open: set[str] = set()  # a label re-entered inside itself counts once

    @contextlib.contextmanager
    def span(self, label: str) -> Iterator[None]:
        if label in self._open:
            yield
            return
        self._open.add(label)
        synchronize(self.device)
        start = time.perf_counter()
        try:
            yield
        finally:
            synchronize(self.device)
            self.seconds[label] += time.perf_counter() - start
            self._open.discard(label)


_ACTIVE: SplitTimer | None = None


@contextlib.contextmanager
def span(label: str) -> Iterator[None]:
    """Time the block under ``label`` when a `SplitTimer` is active (see `timing`), else nothing."""
    if _ACTIVE is None:
        yield
    else:
        with _ACTIVE.span(label):
            yield


@contextlib.contextmanager
def timing(timer: SplitTimer) -> Iterator[SplitTimer]:
    """Activate ``timer`` for the block."""
    global _ACTIVE
    previous, _ACTIVE = _ACTIVE, timer
    try:
        yield timer
    finally:
        _ACTIVE = previous
