"""What every learned drafter shares: loading a head, its context cache, tree options.

Subclasses implement ``propose`` only. The head sees the committed tokens through the target's
tapped hidden states (``observe``), never through engine internals.

Under ``--compile`` (a compiled target) the head's drafting forwards are compiled too: a drafter
that runs them through `ContextCache.forward` and names their entry buckets in `static_shapes`
gets them compiled in `warm_up`, before the clock starts.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from drafters.head_cache import ContextCache, StaticHead
from drafters.tree_builder import TreeOptions
from drafters.tree_tensors import Dists, top_children
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.compiled import check_compile
from jetflow_bench.engine.drafter import DraftCost, Drafter, SequenceView
from jetflow_bench.heads.checkpoint import HeadInfo, load_head
from jetflow_bench.heads.head import DraftHead

if TYPE_CHECKING:
    from jetflow_bench.engine.target import TargetRunner


def head_depth(head: DraftHead) -> int:
    """Drafted depth D of a head: block_size - 1 (one source of truth for every depth cap)."""
    return head.cfg.block_size - 1


class LearnedDrafter(Drafter):
    """A drafter driven by a trained draft head (see ``jetflow_bench.heads.head``)."""

    # Tree options that differ from `TreeOptions`' defaults unless an option overrides them (construction, ...).
    tree_defaults: ClassVar[dict[str, Any]] = {"construction": "accum"}
    default_depth: ClassVar[int | None] = None  # depth cap unless an option sets it; None = the head's depth
    node_scores = "logp"  # cumulative draft log-probs; an instance with scoring="entropy" has None
    trained_as: ClassVar[str | None] = None  # `jfbench train --drafter` name of its heads; None = its own name
    depth_option: ClassVar[str] = "max_depth"  # the option that sets its depth cap, `TreeOptions.max_depth`

    def __init__(self, head: DraftHead, info: HeadInfo, tree: TreeOptions) -> None:
        self.head = head
        self.info = info
        self.tree = tree
        self.taps = head.cfg.taps  # the target hands their outputs over in this order
        self.cache: ContextCache | None = None
        self.meter = head.count_cost()
        self.node_scores = "logp" if tree.scoring == "logp" else None  # entropy scores are not log-probs
        self.static: StaticHead | None = None  # compiled drafting forwards (`build` on a compiled target)

    @classmethod
    def scores_with(cls, options: Mapping[str, Any]) -> str | None:
        scoring = options.get("scoring", cls.tree_defaults.get("scoring", TreeOptions.scoring))  # as `build` resolves it
        return cls.node_scores if scoring == "logp" else None

    @classmethod
    def check_checkpoint(cls, checkpoint: Path | str | None) -> None:
        """A learned arm names its head's folder (``jetflow=DIR``); commands call this before loading a target."""
        if checkpoint is None:
            raise JfbenchError(
                f"drafter {cls.name!r} needs a trained head: write the arm as {cls.name}=DIR, DIR made by "
                f"`jfbench train --drafter {cls.name}` (its recipe defaults) or a released DFlash/JetSpec head directory"
            )

    @classmethod
    def build(cls, target: TargetRunner, checkpoint: Path | None = None, **options: Any) -> LearnedDrafter:
        cls.check_checkpoint(checkpoint)
        attention = options.pop("attention", target.attention_backend)  # the head follows the target
        if target.static is not None:  # --compile: the head's forwards too, through SDPA
            check_compile(target.device, attention, target.compile_mode)
        head, info = cls.load(Path(checkpoint), target, attention)
        cls.check_head(head, info)
        tree_keys = [f.name for f in dataclasses.fields(TreeOptions) if f.name != "max_depth"]
        tree_opts = {**cls.tree_defaults, **{k: options.pop(k) for k in tree_keys if k in options}}
        depth = options.pop(cls.depth_option, cls.default_depth)
        tree_opts["max_depth"] = head_depth(head) if depth is None else depth  # the one depth cap
        try:
            drafter = cls(head, info, TreeOptions(**tree_opts), **options)
        except TypeError as err:
            raise JfbenchError(f"drafter {cls.name!r} got an unknown option: {err}") from err
        if target.static is not None:  # --compile: the head's forwards too
            drafter.static = StaticHead(head, target.device, target.compile_mode)
        return drafter

    @classmethod
    def load(cls, checkpoint: Path, target: TargetRunner, attention: str) -> tuple[DraftHead, HeadInfo]:
        """Read the family's head (jfbench's layout or a released DFlash / JetSpec head) onto the target."""
        return load_head(checkpoint, target, attention)

    @classmethod
    def option_defaults(cls) -> dict[str, Any]:
        """Options ``build`` accepts -> defaults; None = from the head (the depth cap: `head_depth`)."""
        tree = {f.name: f.default for f in dataclasses.fields(TreeOptions) if f.name != "max_depth"}
        tree.update({**cls.tree_defaults, cls.depth_option: cls.default_depth})
        params = list(inspect.signature(cls.__init__).parameters.values())[4:]  # after self, head, info, tree
        return {**tree, **{p.name: p.default for p in params}, "attention": "sdpa"}

    @classmethod
    def train_name(cls) -> str:
        """The drafter name its heads are trained under (``jetflow-refine`` reads ``jetflow`` heads)."""
        return cls.trained_as or cls.name

    @classmethod
    def check_head(cls, head: DraftHead, info: HeadInfo) -> None:
        """Refuse heads of the wrong kind (e.g. a block head for EAGLE)."""

    def static_shapes(self, budget: int) -> tuple[tuple[int, ...], int] | None:
        """``--compile``: (entry buckets, scratch slots) of the head forwards a proposal at ``budget``
        runs through `ContextCache.forward`; None: none (the head runs eager)."""
        return None

    def warm_up(self, batch: int, budget: int, capacity: int) -> float:
        """Compiled: run every head shape of `static_shapes` before the clock starts; the context
        cache holds the target's ``capacity`` slots per row plus the proposal's scratch."""
        shapes = self.static_shapes(budget) if self.static is not None and budget > 1 else None
        if shapes is None:
            return 0.0
        widths, scratch = shapes
        return self.static.warm_up(batch, widths, capacity + scratch)

    def reset(self, seqs: Sequence[SequenceView]) -> None:
        self.cache = None

    def observe(self, seqs: Sequence[SequenceView], features: Sequence[torch.Tensor] | None) -> None:
        if features is None:
            raise RuntimeError(f"drafter {self.name!r} has taps {self.taps} but received no features")
        if self.cache is None:
            self.cache = self.new_cache(seqs)
        self.cache.align(seqs)
        self.cache.observe(seqs, features)

    def admit(self, seqs: Sequence[SequenceView], features: Sequence[torch.Tensor] | None) -> None:
        """The newcomers' prompts go into a context cache of their own, whose rows then join the live one."""
        if self.static is not None:
            raise JfbenchError(f"drafter {self.name!r}: requests joining a running batch (--load) need an eager head: drop --compile")
        live, self.cache = self.cache, None
        self.observe(seqs, features)
        if live is not None:
            live.merge(self.cache)
            self.cache = live

    def new_cache(self, seqs: Sequence[SequenceView]) -> ContextCache:
        """The head's context cache for a new batch."""
        return ContextCache(self.head, [s.request for s in seqs], static=self.static)

    def children(self, logits: torch.Tensor) -> Dists:
        """Head logits (R, S, V or N draft slots) -> each slot's top-``fanout`` children as target
        token ids (entropies only when scored by them)."""
        dists = top_children(logits, self.tree.fanout, with_entropy=self.tree.scoring == "entropy")
        if self.head.d2t is None:
            return dists
        return Dists(self.head.to_target(dists.tokens), dists.logps, dists.entropy)

    def take_cost(self, rows: int) -> DraftCost:
        return self.meter.take(rows)

    def require_cache(self, seqs: Sequence[SequenceView]) -> ContextCache:
        if self.cache is None:
            raise RuntimeError("propose() before observe(): the engine must report the prompt first")
        self.cache.align(seqs)
        return self.cache
