"""Opt-in split of drafting time (`jfbench bench drafter`): labelled spans with device syncs.

Drafters mark their non-forward work with ``with span("tree"):``. Nothing is timed (and nothing
synchronises) unless a `SplitTimer` is active, so a span costs one global lookup in normal runs.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Iterator

import torch

from jetflow_bench.core.runtime import synchronize


class SplitTimer:
    """Seconds per label, summed; every span waits for queued device work before reading the clock.

    Spans of different labels may nest (a "head" span inside a "draft" span counts in both).
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds: dict[str, float] = defaultdict(float)
        self._open: set[str] = set()  # a label re-entered inside itself counts once

    def span(self, label: str) -> _Span:
        return _Span(self, label)


class _Span:
    """One timed block. A plain class rather than a generator context manager: the timer's own
    overhead lands in the split it measures, so it is kept to two clock reads and two set updates."""

    __slots__ = ("timer", "label", "start", "counted")

    def __init__(self, timer: SplitTimer, label: str) -> None:
        self.timer, self.label = timer, label

    def __enter__(self) -> None:
        timer = self.timer
        self.counted = self.label not in timer._open
        if self.counted:
            timer._open.add(self.label)
            synchronize(timer.device)
            self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        if self.counted:
            timer = self.timer
            synchronize(timer.device)
            timer.seconds[self.label] += time.perf_counter() - self.start
            timer._open.discard(self.label)


_ACTIVE: SplitTimer | None = None
_UNTIMED = contextlib.nullcontext()


def span(label: str) -> contextlib.AbstractContextManager:
    """Time the block under ``label`` when a `SplitTimer` is active (see `timing`), else nothing."""
    return _UNTIMED if _ACTIVE is None else _ACTIVE.span(label)


@contextlib.contextmanager
def timing(timer: SplitTimer) -> Iterator[SplitTimer]:
    """Activate ``timer`` for the block."""
    global _ACTIVE
    previous, _ACTIVE = _ACTIVE, timer
    try:
        yield timer
    finally:
        _ACTIVE = previous
