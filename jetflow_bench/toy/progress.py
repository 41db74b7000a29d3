"""Training progress on stderr: a rich bar on a terminal, plain periodic lines in a log file."""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.progress import Progress, TextColumn

from jetflow_bench.progress import progress_bar


class TrainProgress:
    """Shows step, tokens/s, smoothed loss and ETA; `enabled=False` keeps it silent (tests)."""

    def __init__(self, total_steps: int, tokens_per_step: int, label: str, enabled: bool = True) -> None:
        self.total_steps = total_steps
        self.tokens_per_step = tokens_per_step
        self.label = label
        self.enabled = enabled
        self.console = Console(stderr=True, highlight=False, soft_wrap=True)
        self.loss_ema: float | None = None
        self._start = time.perf_counter()
        self._timed_from: tuple[int, float] | None = None  # (step, time) after the first, slower step
        self._log_every = max(1, total_steps // 20)
        self._bar: Progress | None = None
        self._task = None

    def __enter__(self) -> TrainProgress:
        if self.enabled and self.console.is_terminal:
            self._bar = progress_bar(
                self.console, "[bold]{task.description}",
                TextColumn("{task.fields[tps]:>6.0f} tok/s  loss {task.fields[loss]:.3f}"),
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.label, total=self.total_steps, tps=0.0, loss=float("nan"))
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)

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
