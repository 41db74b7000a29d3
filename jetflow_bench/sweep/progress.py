"""Sweep progress on stderr: live bars on a terminal, one line per finished cell in a log.

Results go to the run folder and stdout stays free for machine-readable output, so everything
here prints to stderr.
"""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import Progress, TaskID, TextColumn

from jetflow_bench.progress import progress_bar


class SweepProgress:
    """Overall cells (with ETA), the prompt batches of the repeat being timed and its tokens/s
    (the sweep times a pairing group's cells interleaved, so progress is per repeat of a group)."""

    def __init__(self, total_cells: int, done_cells: int, enabled: bool = True) -> None:
        self.console = Console(stderr=True, highlight=False, soft_wrap=True)
        self.enabled = enabled
        self.total = total_cells
        self.done = done_cells
        self._bar: Progress | None = None
        self._overall: TaskID | None = None
        self._cell: TaskID | None = None
        self._cell_tokens = 0
        self._cell_start = 0.0
        self._label = ""

    def __enter__(self) -> SweepProgress:
        if self.enabled and self.console.is_terminal:
            self._bar = progress_bar(self.console, "{task.description}", TextColumn("{task.fields[rate]}"))
            self._bar.__enter__()
            self._overall = self._bar.add_task("cells", total=self.total, completed=self.done, rate="")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)

    def start(self, label: str, n_rounds: int) -> None:
        self._label, self._cell_tokens, self._cell_start = label, 0, time.perf_counter()
        if self._bar is not None:
            if self._cell is not None:
                self._bar.remove_task(self._cell)
            self._cell = self._bar.add_task(self._label, total=n_rounds, rate="")

    def advance(self, rounds: int, tokens: int) -> None:
        """Called after each round (one prompt batch, every interleaved slot) with the tokens it decoded."""
        self._cell_tokens += tokens
        if self._bar is not None and self._cell is not None:
            rate = self._cell_tokens / max(time.perf_counter() - self._cell_start, 1e-9)
            self._bar.update(self._cell, advance=rounds, rate=f"{rate:,.0f} tok/s")

    def end_cell(self, cell: str) -> None:
        """Called as each cell is stored; the log line's rate covers its repeat's interleaved slots."""
        self.done += 1
        elapsed = time.perf_counter() - self._cell_start
        if self._bar is not None:
            self._bar.update(self._overall, completed=self.done)
        elif self.enabled:
            rate = self._cell_tokens / max(elapsed, 1e-9)
            self.console.print(
                f"[{self.done}/{self.total}] {cell} ({self._label}: {self._cell_tokens} tokens, {rate:,.0f} tok/s "
                f"incl. warm-ups and checks, {elapsed:.1f} s)"
            )

    def cells_stored(self, cells: int, text: str) -> None:
        """Cells that ran elsewhere (a cluster executor's group), stored at once; ``text`` says where."""
        self.done += cells
        if self._bar is not None:
            self._bar.update(self._overall, completed=self.done)
        elif self.enabled:
            self.console.print(f"[{self.done}/{self.total}] {text}")

    def note(self, text: str) -> None:
        """A warning or note about a cell: printed with or without the progress display."""
        self.console.print(text)
