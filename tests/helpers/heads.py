"""Small random Qwen3 targets and untrained draft heads for them, shared by the drafter tests
(the `target` and `checkpoints` fixtures in tests/conftest.py build on these)."""

from __future__ import annotations

from pathlib import Path

from drafters.head_cache import ContextCache
from jetflow_bench.engine.drafter import SequenceView
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.heads.checkpoint import TargetShape, save_head
from jetflow_bench.heads.head import DraftHead, HeadConfig
from tests.helpers.random_models import random_model, word_tokenizer

PROMPTS = [[3, 4, 5, 6, 7, 8, 9], [10, 11, 12]]


def save_target(path: Path, layers: int = 2) -> Path:
    random_model("qwen3", layers=layers).save_pretrained(path)
    word_tokenizer().save_pretrained(path)
    return path


def head_config(mode: str = "causal", eagle: bool = False, layers: int = 1, taps=(0, 1)) -> HeadConfig:
    return HeadConfig(
        hidden_size=64, intermediate_size=128, num_layers=layers, num_heads=4, num_kv_heads=2, head_dim=16,
        taps=taps, block_size=8, mode=mode, mask_token_id=2, eagle_input=eagle,
    )


def make_head(target: TargetRunner, path: Path, drafter: str, cfg: HeadConfig, seed: int = 0) -> Path:
    head = DraftHead(cfg, target.embed, target.lm_head)
    head.init_weights(seed)
    return save_head(head, path, drafter, TargetShape.of(target), {"note": "random"})


HEADS = {"eagle": head_config(eagle=True), "dflash": head_config("bidirectional", layers=2), "jetflow": head_config(layers=2)}


def observed_cache(target: TargetRunner, head: DraftHead, prompts=PROMPTS) -> tuple[ContextCache, list[SequenceView]]:
    """A context cache fed the way the engine feeds drafters: prompt features after prefill."""
    out = target.score(prompts, taps=head.cfg.taps)
    seqs = [SequenceView(i, [*p, 1], len(p)) for i, p in enumerate(prompts)]
    cache = ContextCache(head, [s.request for s in seqs], capacity=4)  # tiny: forces growth
    cache.append([out.hidden[i, : len(p)] for i, p in enumerate(prompts)])
    return cache, seqs
