"""Progress on stderr (stdout stays for results): the one bar layout every long command uses, the
sweep's and training's displays built on it (a live bar on a terminal, plain lines in a log), and
`say` for a note wrapped to the output width."""

from __future__ import annotations

import os
import shutil
import sys
import textwrap
import time
from types import TracebackType
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

LOG_EVERY_S = 60.0  # off a terminal, the sweep's in-repeat lines come at most this often


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


class _Display:
    """A live bar on a terminal (opened by the subclass's ``__enter__`` through `_open`), else plain
    lines; ``enabled=False`` keeps it silent (tests)."""

    def __init__(self, enabled: bool) -> None:
        self.console = Console(stderr=True, highlight=False, soft_wrap=True)
        self.enabled = enabled
        self._bar: Progress | None = None

    def _open(self, description: str, *middle: ProgressColumn, transient: bool = False) -> Progress | None:
        if self.enabled and self.console.is_terminal:
            self._bar = progress_bar(self.console, description, *middle, transient=transient)
            self._bar.__enter__()
        return self._bar

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)


class CountProgress(_Display):
    """Items done of a total (prompts regenerated, sequences scored): a transient bar on a terminal,
    else a line at each twentieth of the work with the elapsed time and the measured ETA, so a log
    of an hour-long step says how far it is."""

    def __init__(self, label: str, total: int, enabled: bool = True) -> None:
        super().__init__(enabled)
        self.label, self.total, self.done = label, total, 0
        self._start = time.perf_counter()
        self._next_line = self._step = max(1, -(-total // 20))
        self._task: TaskID | None = None

    def __enter__(self) -> CountProgress:
        if self._open(self.label, transient=True) is not None:
            self._task = self._bar.add_task(self.label, total=self.total)
        return self

    def advance(self, items: int) -> None:
        """Called as ``items`` more are done."""
        self.done += items
        if self._bar is not None:
            self._bar.advance(self._task, items)
        elif self.enabled and (self.done >= self._next_line or self.done >= self.total):
            elapsed = time.perf_counter() - self._start
            eta = (self.total - self.done) * elapsed / self.done
            self.console.print(f"{self.label} {self.done}/{self.total}  elapsed {elapsed / 60:.1f} min  "
                               f"ETA {eta / 60:.1f} min")
            while self._next_line <= self.done:
                self._next_line += self._step


class SweepProgress(_Display):
    """Overall cells (with ETA), the prompt batches of the repeat being timed and its tokens/s
    (the sweep times a pairing group's cells interleaved, so progress is per repeat of a group)."""

    def __init__(self, total_cells: int, done_cells: int, enabled: bool = True) -> None:
        super().__init__(enabled)
        self.total = total_cells
        self.done = done_cells
        self._overall: TaskID | None = None
        self._cell: TaskID | None = None
        self._cell_tokens = 0
        self._cell_start = 0.0
        self._label = ""
        self._rounds = self._rounds_done = 0
        self._last_line = 0.0

    def __enter__(self) -> SweepProgress:
        if self._open("{task.description}", TextColumn("{task.fields[rate]}")) is not None:
            self._overall = self._bar.add_task("cells", total=self.total, completed=self.done, rate="")
        return self

    def start(self, label: str, n_rounds: int) -> None:
        self._label, self._cell_tokens, self._cell_start = label, 0, time.perf_counter()
        self._rounds, self._rounds_done, self._last_line = n_rounds, 0, self._cell_start
        if self._bar is not None:
            if self._cell is not None:
                self._bar.remove_task(self._cell)
            self._cell = self._bar.add_task(self._label, total=n_rounds, rate="")

    def advance(self, rounds: int, tokens: int) -> None:
        """Called after each round (one prompt batch, every interleaved slot) with the tokens it decoded;
        off a terminal, a line at most once a minute (`LOG_EVERY_S`) says how far a long repeat is."""
        self._cell_tokens += tokens
        self._rounds_done += rounds
        now = time.perf_counter()
        rate = self._cell_tokens / max(now - self._cell_start, 1e-9)
        if self._bar is not None and self._cell is not None:
            self._bar.update(self._cell, advance=rounds, rate=f"{rate:,.0f} tok/s")
        elif self.enabled and now - self._last_line >= LOG_EVERY_S and self._rounds_done < self._rounds:
            self._last_line = now
            self.console.print(f"  {self._label}: round {self._rounds_done}/{self._rounds}, {self._cell_tokens} tokens, "
                               f"{rate:,.0f} tok/s, {(now - self._cell_start) / 60:.1f} min")

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


class TrainProgress(_Display):
    """Shows step, tokens/s, smoothed loss and ETA; `enabled=False` keeps it silent (tests)."""

    def __init__(self, total_steps: int, tokens_per_step: int, label: str, enabled: bool = True) -> None:
        self.total_steps = total_steps
        self.tokens_per_step = tokens_per_step
        self.label = label
        super().__init__(enabled)
        self.loss_ema: float | None = None
        self._start = time.perf_counter()
        self._timed_from: tuple[int, float] | None = None  # (step, time) after the first, slower step
        self._log_every = max(1, total_steps // 20)
        self._task = None

    def __enter__(self) -> TrainProgress:
        rate = TextColumn("{task.fields[tps]:>6.0f} tok/s  loss {task.fields[loss]:.3f}")
        if self._open("[bold]{task.description}", rate) is not None:
            self._task = self._bar.add_task(self.label, total=self.total_steps, tps=0.0, loss=float("nan"))
        return self

    def tokens_per_second(self, step: int) -> float:
        """Throughput since the end of step 1 (its one-off allocation cost excluded)."""
        if self._timed_from is None or step <= self._timed_from[0]:
            return 0.0
        first_step, first_time = self._timed_from
        return (step - first_step) * self.tokens_per_step / (time.perf_counter() - first_time)

    def update(self, step: int, loss: float) -> None:
        """Record the loss of finished step `step` (1-based) and refresh the display."""
        self.loss_ema = loss if self.loss_ema is None else 0.95 * self.loss_ema + 0.05 * loss
        if step == 1:
            self._timed_from = (1, time.perf_counter())
        if not self.enabled:
            return
        tps = self.tokens_per_second(step)
        if step == min(6, self.total_steps) and tps > 0:
            eta = (self.total_steps - step) * self.tokens_per_step / tps
            self.console.print(
                f"{self.label}: {self.total_steps} steps at ~{tps:,.0f} tok/s, estimated {eta / 60:.1f} min"
            )
        if self._bar is not None:
            self._bar.update(self._task, completed=step, tps=tps, loss=self.loss_ema)
        elif step % self._log_every == 0 or step == self.total_steps:
            elapsed = time.perf_counter() - self._start
            eta = (self.total_steps - step) * self.tokens_per_step / tps if tps else float("nan")
            self.console.print(
                f"{self.label} step {step}/{self.total_steps}  loss {self.loss_ema:.3f}  {tps:,.0f} tok/s  "
                f"elapsed {elapsed / 60:.1f} min  ETA {eta / 60:.1f} min"
            )
