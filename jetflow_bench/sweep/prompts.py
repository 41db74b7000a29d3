"""Suite requests -> token ids for a given target (the one place prompts meet a tokenizer)."""

from __future__ import annotations

from pathlib import Path

from jetflow_bench.engine.target import TargetRunner
from suites import Request, get_suite


def suite_requests(
    target: TargetRunner,
    suite_name: str,
    data_dir: Path | None,
    limit: int | None,
    max_new_tokens: int | None = None,
    sample_seed: int | None = None,
) -> list[Request]:
    """The suite's first-turn requests, formatted for ``target``'s tokenizer."""
    suite = get_suite(suite_name)
    loaded = suite.load(data_dir, limit=limit, sample_seed=sample_seed)
    return suite.requests(loaded, target.tokenizer, max_new_tokens)


def encode(target: TargetRunner, text: str) -> list[int]:
    """Prompt text -> ids exactly as the model sees it.

    The tokenizer adds its own specials (a Llama-style BOS) as a `generate` user's call would,
    except when the text already starts with them (a chat template wrote the BOS). Models
    without a BOS (Qwen, the toy target) get the text's tokens only.
    """
    tokenizer = target.tokenizer
    templated = bool(tokenizer.bos_token) and text.startswith(tokenizer.bos_token)
    return tokenizer(text, add_special_tokens=not templated)["input_ids"]
