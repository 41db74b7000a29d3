"""The one progress-bar layout every long command uses (on stderr, so stdout stays for results)."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text


class MeasuredRemainingColumn(ProgressColumn):
    """Time left at the rate measured since the task's first finished unit, over all units since.

    The first unit (a training step, a cell, a batch) carries one-off costs such as allocation and
    warm-up, and rich's own estimate looks at the last 30 s only, which is one unit or none when
    units take minutes; both gave first ETAs far off. Until a second unit finishes it shows "-".
    """

    def __init__(self) -> None:
        super().__init__()
        self._first: dict[TaskID, tuple[float, float]] = {}  # task -> (completed, time) when first seen moving

    def render(self, task: Task) -> Text:
        now = time.perf_counter()
        if task.total is None or task.finished:
            return Text("0:00:00" if task.finished else "-", style="progress.remaining")
        start = self._first.get(task.id)
        if start is None:
            if task.completed > 0:
                self._first[task.id] = (task.completed, now)
            return Text("-", style="progress.remaining")
        done, elapsed = task.completed - start[0], now - start[1]
        if done <= 0 or elapsed <= 0:
            return Text("-", style="progress.remaining")
        seconds = int((task.total - task.completed) * elapsed / done)
        return Text(f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}", style="progress.remaining")


def progress_bar(console: Console, description: str, *middle: ProgressColumn, **options: Any) -> Progress:
    """description | bar | done/total | <middle columns> | elapsed | ETA remaining (`MeasuredRemainingColumn`).

    ``options`` go to rich's `Progress` (``transient``, ``disable``)."""
    return Progress(
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn(),
        *middle,
        TimeElapsedColumn(),
        TextColumn("ETA"),
        MeasuredRemainingColumn(),
        console=console,
        **options,
    )


def output_width() -> int | None:
    """The width output must fit: the terminal's or COLUMNS; None off a terminal without COLUMNS."""
    if os.environ.get("COLUMNS", "").isdigit() or sys.stdout.isatty() or sys.stderr.isatty():
        return shutil.get_terminal_size().columns
    return None


def say(text: str, file: Any = None) -> None:
    """Print a note (stderr by default) wrapped to `output_width`; a path longer than the width stays whole."""
    width = output_width()
    lines = textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False) if width else [text]
    print("\n".join(lines), file=file or sys.stderr)
