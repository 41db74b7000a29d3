"""Training sequences for draft heads: the target's own continuations (regen) or reference text (raw).

Prompts come from training splits only (GSM8K train, MBPP's train ids 601-974, ShareGPT), and are
formatted exactly as the benchmark suites format their prompts (chat template when the tokenizer
has one), so the head learns the target's behaviour on benchmark-shaped inputs without seeing a
test item. ``regen`` decodes each prompt greedily with the target through the engine (batched,
no drafter) and caches the token ids on disk under ``runtime.cache_dir()/train_data``, keyed by
target + prompts + decoding settings; ``raw`` appends the corpus' own answer instead.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from filelock import FileLock
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from jetflow_bench import runtime
from jetflow_bench.engine.loop import generate
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.errors import JfbenchError
from jetflow_bench.fingerprint import model_fingerprint
from jetflow_bench.training.config import TrainConfig
from suites import get_suite
from suites.base import Record, render_chat
from suites.sources import read_rows

FORMAT_VERSION = 1
FILES = {"gsm8k": "gsm8k/train.jsonl", "mbpp": "mbpp/mbpp.jsonl", "sharegpt": "sharegpt_chat/ShareGPT_V3_unfiltered_cleaned_split.first2023.json"}
MBPP_TRAIN_IDS = range(601, 975)  # MBPP's own train split; the benchmark suite scores all 974
REGEN_BATCH = 16


@dataclass(frozen=True)
class Pair:
    """A training prompt (exact model input text) and the corpus' own answer to it."""

    source: str
    prompt: str
    reference: str


def _gsm8k(rows, tokenizer) -> Iterator[Pair]:
    suite = get_suite("gsm8k")
    for where, rec in rows:
        yield Pair("gsm8k", suite.format_prompt(Record("gsm8k", where, rec), tokenizer), rec["answer"])


def _mbpp(rows, tokenizer) -> Iterator[Pair]:
    suite = get_suite("mbpp")
    for where, rec in rows:
        if rec.get("task_id") in MBPP_TRAIN_IDS:
            yield Pair("mbpp", suite.format_prompt(Record("mbpp", where, rec), tokenizer), rec["code"])


def _sharegpt(rows, tokenizer) -> Iterator[Pair]:
    """The first user turn and the reply that follows it."""
    for _, rec in rows:
        turns = rec.get("conversations") or []
        for first, second in zip(turns, turns[1:], strict=False):
            if first.get("from") == "human" and second.get("from") == "gpt" and first.get("value", "").strip():
                user = first["value"].strip()
                prompt = render_chat(tokenizer, [{"role": "user", "content": user}], f"User: {user}\nAssistant:")
                yield Pair("sharegpt", prompt, second.get("value", "").strip())
                break


READERS = {"gsm8k": _gsm8k, "mbpp": _mbpp, "sharegpt": _sharegpt}


def training_pairs(sources: tuple[str, ...], count: int, seed: int, tokenizer, data_dir: Path | None) -> list[Pair]:
    """``count`` pairs spread evenly over ``sources`` (a seeded sample of each, interleaved)."""
    folder = runtime.data_dir(data_dir)
    if folder is None:
        raise JfbenchError("training data needs --data-dir (or JFBENCH_DATA_DIR) pointing at the shared data folder")
    per_source = []
    for name in sources:
        path = folder / FILES[name]
        if not path.is_file():
            raise JfbenchError(f"--corpus {name}: {path} is missing; fix --data-dir or leave {name} out of --corpus")
        rows = [(w, r) for w, r in read_rows(path) if isinstance(r, dict)]  # unparsable lines are skipped
        pairs = list(READERS[name](rows, tokenizer))
        random.Random(seed).shuffle(pairs)
        per_source.append(pairs)
    mixed = [p for group in zip(*per_source, strict=False) for p in group]  # round-robin
    leftovers = [p for pairs in per_source for p in pairs[min(map(len, per_source)):]]
    return (mixed + leftovers)[:count]


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]  # long prompts are dropped later


def regenerate(
    target: TargetRunner, prompts: list[list[int]], max_new_tokens: int, show_progress: bool
) -> list[list[int]]:
    """Greedy continuations of ``prompts`` by the target (engine, no drafter, batched by length)."""
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    outputs: list[list[int]] = [[] for _ in prompts]
    stop = StopRule(max_new_tokens, frozenset(target.eos_token_ids))
    columns = (TextColumn("regen"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=not show_progress, transient=True) as bar:
        task = bar.add_task("regen", total=len(prompts))
        for start in range(0, len(order), REGEN_BATCH):
            batch = order[start : start + REGEN_BATCH]
            result = generate(target, [prompts[i] for i in batch], stop)
            for i, request in zip(batch, result.requests, strict=True):
                outputs[i] = request.output_tokens
            bar.advance(task, len(batch))
    return outputs


def training_sequences(
    target: TargetRunner, config: TrainConfig, data_dir: Path | None, show_progress: bool = True
) -> list[list[int]]:
    """Token sequences (prompt + continuation) to train on; regen results come from the disk cache when present."""
    tokenizer = target.tokenizer
    pairs = training_pairs(config.corpus, config.prompts, config.seed, tokenizer, data_dir)
    limit = config.seq_len - config.block_size - 1  # room for at least one block after the prompt
    prompts = [ids for ids in (_encode(tokenizer, p.prompt) for p in pairs) if 0 < len(ids) <= limit]
    eos = list(target.eos_token_ids[:1])
    if config.data == "raw":
        return [_encode(tokenizer, _joined(p)) + eos for p in pairs]
    key = json.dumps({
        "target": model_fingerprint(target.name), "prompts": hashlib.sha256(json.dumps(prompts).encode()).hexdigest(),
        "max_new_tokens": config.max_new_tokens, "dtype": str(target.dtype), "device": target.device.type,
        "format": FORMAT_VERSION,
    }, sort_keys=True)
    path = runtime.cache_dir() / "train_data" / f"regen-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path.with_suffix(".lock")):  # trainers of the same seed started together regenerate once
        if path.is_file():
            return json.loads(path.read_text())["sequences"]
        if show_progress:
            print(f"regenerating {len(prompts)} training continuations with the target (cached at {path})", file=sys.stderr)
        outputs = regenerate(target, prompts, config.max_new_tokens, show_progress)
        sequences = [p + o for p, o in zip(prompts, outputs, strict=True)]
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"key": json.loads(key), "sequences": sequences}))
        tmp.rename(path)
        return sequences


def _joined(pair: Pair) -> str:
    """Prompt + the corpus' answer, with one space where the prompt does not end in whitespace."""
    gap = "" if pair.prompt[-1:].isspace() else " "
    return pair.prompt + gap + pair.reference


class SequenceBatcher:
    """Seeded batches of whole sequences, right-padded: tokens (B, T) and lengths (B,)."""

    def __init__(self, sequences: list[list[int]], seq_len: int, min_len: int, pad_id: int) -> None:
        self.sequences = [s[:seq_len] for s in sequences if len(s) >= min_len]
        if not self.sequences:
            raise JfbenchError(f"no training sequence has the {min_len} tokens a block needs: raise --max-new-tokens")
        self.pad_id = pad_id

    def batch(self, size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        picks = torch.randint(0, len(self.sequences), (size,), generator=generator).tolist()
        rows = [self.sequences[i] for i in picks]
        lengths = torch.tensor([len(r) for r in rows])  # (B,)
        tokens = torch.full((size, int(lengths.max())), self.pad_id, dtype=torch.long)  # (B, T)
        for b, row in enumerate(rows):
            tokens[b, : len(row)] = torch.tensor(row)
        return tokens, lengths

    def token_count(self) -> int:
        return sum(len(s) for s in self.sequences)
