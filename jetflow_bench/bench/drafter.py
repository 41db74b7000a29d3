"""Where drafting time goes: head forwards vs tree construction vs the rest, beside AR and verify.

One speculative run per (drafter, budget) with a `drafters.timing.SplitTimer` active:

    draft   = drafter.propose + drafter.observe        (what the engine's draft_s counts)
    head    = the head's input embedding (block heads' anchor and MASK rows; EAGLE's input
              projection), its forward, LM-head logits, context fusion, and the K/V projections
              of the newly committed context
    tree    = the spans drafters mark "tree" (tree construction, frontier, refinement entries)
    rest    = draft - head - tree                      (other host work inside the drafter)
    non-forward share = (draft - head) / draft

plus the verify time of that run and the step time of a plain AR run on the same prompts. Every
span synchronises the device, so on a GPU the split is exact but the run is slower than a sweep.
The prompts are decoded in batches, one after another, and each batched forward counts once in
the means. Several prompts, not one: one prompt gives only 30-70 steps, whose split moves by a
point or two between runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from drafters.timing import SplitTimer, span, timing
from jetflow_bench.engine.drafter import Drafter
from jetflow_bench.engine.loop import BatchResult, StepRecord, generate
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.measure import metrics

# The draft head's compute: its input embedding (block heads' anchor + MASK rows, EAGLE's fused
# inputs), its forward, LM-head logits, context fusion and the context K/V projections.
HEAD_METHODS = ("block_inputs", "eagle_inputs", "forward", "logits", "fuse", "context_kv")


@dataclass(frozen=True)
class DraftSplit:
    """Per verify step (batched forward) means, milliseconds."""

    drafter: str
    budget: int
    batch_size: int
    steps: int
    tau: float  # tokens per verify step, bonus included
    draft_ms: float
    head_ms: float
    tree_ms: float
    rest_ms: float
    verify_ms: float  # the target's forward over the trees
    ar_step_ms: float  # one plain decode step (target forward + engine work), same prompts

    @property
    def non_forward_share(self) -> float:
        """(drafting time - head forwards) / drafting time."""
        return (self.draft_ms - self.head_ms) / self.draft_ms if self.draft_ms else float("nan")

    def row(self) -> dict:
        return {**asdict(self), "non_forward_share": self.non_forward_share}


def _batched(steps: Sequence[StepRecord]) -> list[StepRecord]:
    """One record per batched forward (rows of one forward share its times)."""
    return list({s.batch_step: s for s in steps}.values())


@contextmanager
def _timed(drafter: Drafter, timer: SplitTimer) -> Iterator[None]:
    """Time the drafter's calls ("draft") and its head's compute ("head") through instance wrappers."""

    def wrap(owner: object, name: str, label: str) -> Callable[[], None]:
        original = getattr(owner, name)

        @functools.wraps(original)
        def timed(*args, **kwargs):
            with span(label):
                return original(*args, **kwargs)

        setattr(owner, name, timed)
        return lambda: delattr(owner, name)  # the instance attribute shadowed the class's method

    undo = [wrap(drafter, "propose", "draft"), wrap(drafter, "observe", "draft")]
    head = getattr(drafter, "head", None)
    if head is not None:
        undo += [wrap(head, name, "head") for name in HEAD_METHODS if hasattr(head, name)]
    try:
        with timing(timer):
            yield
    finally:
        for restore in undo:
            restore()


Batches = Sequence[Sequence[Sequence[int]]]  # batches of prompts (token ids), decoded one after another


def ar_step_ms(target: TargetRunner, batches: Batches, stop: StopRule) -> float:
    """Mean wall time of one plain decode step over every batch (after a warm-up on the first)."""
    generate(target, batches[0], stop)
    steps = [s for prompts in batches for s in _batched(generate(target, prompts, stop, profile=True).steps)]
    return 1e3 * sum(s.draft_s + s.verify_s + s.other_s for s in steps) / len(steps)


def split_drafter(
    name: str, drafter: Drafter, target: TargetRunner, batches: Batches, stop: StopRule, budget: int, ar_ms: float,
) -> DraftSplit:
    """Warm up on the first batch, then one timed speculative run over every batch -> the per-step split."""
    generate(target, batches[0], stop, budget=budget, drafter=drafter)
    timer = SplitTimer(target.device)
    with _timed(drafter, timer):
        results: list[BatchResult] = [generate(target, prompts, stop, budget=budget, drafter=drafter, profile=True)
                                      for prompts in batches]
    rows = [s for r in results for s in r.steps]
    steps = [s for r in results for s in _batched(r.steps)]
    n = len(steps)
    draft, head, tree = (1e3 * timer.seconds[k] / n for k in ("draft", "head", "tree"))
    tau = float(metrics.tau(sum(s.emitted for s in rows), len(rows)))
    verify = 1e3 * sum(s.verify_s for s in steps) / n
    return DraftSplit(name, budget, len(batches[0]), n, tau, draft, head, tree, draft - head - tree, verify, ar_ms)
