"""Training sequences for draft heads: the target's own continuations (regen) or reference text (raw).

Prompts come from training splits only (GSM8K train, MBPP's train ids 601-974, ShareGPT), and are
formatted exactly as the benchmark suites format their prompts (chat template when the tokenizer
has one), so the head learns the target's behaviour on benchmark-shaped inputs without seeing a
test item. ``regen`` decodes each prompt greedily with the target through the engine (batched,
no drafter) and caches the token ids on disk under ``runtime.cache_dir()/train_data``, keyed by
target + prompts + decoding settings; ``raw`` appends the corpus' own answer instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from filelock import FileLock

from jetflow_bench.core import runtime
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.fingerprint import model_fingerprint
from jetflow_bench.core.progress import CountProgress, say
from jetflow_bench.engine.loop import generate
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.training.config import TrainConfig
from suites import get_suite
from suites.base import Record, render_chat
from suites.sources import read_rows

FORMAT_VERSION = 1
FILES = {"gsm8k": "gsm8k/train.jsonl", "mbpp": "mbpp/mbpp.jsonl", "sharegpt": "sharegpt_chat/ShareGPT_V3_unfiltered_cleaned_split.first2023.json"}
MBPP_TRAIN_IDS = range(601, 975)  # MBPP's own train split; the benchmark suite scores all 974
REGEN_BATCH = 16


@dataclass(frozen=True)
class Sample:
    """A training sequence (prompt + continuation) and its prompt's token count: the loss covers
    only the continuation, so the head learns what the target writes, not the prompts it is given."""

    tokens: list[int]
    prompt_len: int


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


@contextlib.contextmanager
def progress_steps(label: str, total: int, show: bool) -> Iterator[Callable[[int], None]]:
    """`CountProgress` over ``total`` items on stderr (a bar, or lines in a log); yields ``advance(n)``."""
    with CountProgress(label, total, show) as progress:
        yield progress.advance


def regenerate(
    target: TargetRunner, prompts: list[list[int]], max_new_tokens: int, show_progress: bool,
    journal: Path | None = None,
) -> list[list[int]]:
    """Greedy continuations of ``prompts`` by the target (engine, no drafter, batched by length).

    With a ``journal`` file, every finished batch is appended to it (one JSON line per prompt:
    index and output) and a rerun skips the prompts it holds, so an interrupted regeneration of
    thousands of prompts loses at most one batch.
    """
    outputs: dict[int, list[int]] = _journaled(journal) if journal is not None else {}
    order = sorted((i for i in range(len(prompts)) if i not in outputs), key=lambda i: len(prompts[i]))
    stop = StopRule(max_new_tokens, frozenset(target.eos_token_ids))
    if outputs and show_progress:
        say(f"resuming: {len(outputs)} of {len(prompts)} continuations already in {journal}")
    with progress_steps("regen", len(order), show_progress) as advance:
        for start in range(0, len(order), REGEN_BATCH):
            batch = order[start : start + REGEN_BATCH]
            result = generate(target, [prompts[i] for i in batch], stop)
            done = {i: request.output_tokens for i, request in zip(batch, result.requests, strict=True)}
            outputs.update(done)
            if journal is not None:
                with journal.open("a") as f:
                    f.writelines(json.dumps({"i": i, "out": out}) + "\n" for i, out in done.items())
            advance(len(batch))
    return [outputs[i] for i in range(len(prompts))]


def _journaled(journal: Path) -> dict[int, list[int]]:
    """Prompt index -> output from a regeneration journal; a line cut short by a kill is ignored."""
    if not journal.is_file():
        return {}
    outputs = {}
    for line in journal.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError, KeyError, TypeError):
            row = json.loads(line)
            outputs[int(row["i"])] = [int(t) for t in row["out"]]
    return outputs


def training_sequences(
    target: TargetRunner, config: TrainConfig, data_dir: Path | None, show_progress: bool = True
) -> list[Sample]:
    """Token sequences (prompt + continuation) to train on; regen results come from the disk cache when present.

    The regen cache stores prompt + output only; each prompt's length comes from the prompts
    recomputed here (deterministic), so caches written before prompt lengths were kept still serve.
    """
    tokenizer = target.tokenizer
    if config.data == "raw":
        pairs = training_pairs(config.corpus, config.prompts, config.prompt_seed, tokenizer, data_dir)
        eos = list(target.eos_token_ids[:1])
        joined = [(_encode(tokenizer, p.prompt), _encode(tokenizer, _joined(p)) + eos) for p in pairs]
        return [Sample(ids, _common_prefix(prompt, ids)) for prompt, ids in joined]
    prompts, key, path = regen_entry(target, config, data_dir)
    with FileLock(path.with_suffix(".lock")):  # trainers of the same seed started together regenerate once
        if path.is_file():
            sequences = json.loads(path.read_text())["sequences"]
        else:
            if show_progress:
                say(f"regenerating {len(prompts)} training continuations with the target (cached at {path})")
            journal = path.with_suffix(".partial.jsonl")  # a rerun resumes an interrupted regeneration
            outputs = regenerate(target, prompts, config.max_new_tokens, show_progress, journal)
            _write_entry(path, key, [p + o for p, o in zip(prompts, outputs, strict=True)])
            journal.unlink(missing_ok=True)
            sequences = json.loads(path.read_text())["sequences"]
    return [Sample(seq, len(prompt)) for prompt, seq in zip(prompts, sequences, strict=True)]


def regen_entry(target: TargetRunner, config: TrainConfig, data_dir: Path | None) -> tuple[list[list[int]], dict, Path]:
    """The training prompts of ``config`` (token ids), their regen cache key and its file."""
    pairs = training_pairs(config.corpus, config.prompts, config.prompt_seed, target.tokenizer, data_dir)
    limit = config.seq_len - config.block_size - 1  # room for at least one block after the prompt
    prompts = [ids for ids in (_encode(target.tokenizer, p.prompt) for p in pairs) if 0 < len(ids) <= limit]
    key = {
        "target": model_fingerprint(target.name), "prompts": hashlib.sha256(json.dumps(prompts).encode()).hexdigest(),
        "max_new_tokens": config.max_new_tokens, "dtype": str(target.dtype), "device": target.device.type,
        "format": FORMAT_VERSION,
    }
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = runtime.cache_dir() / "train_data" / f"regen-{digest}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    return prompts, key, path


def _write_entry(path: Path, key: dict, sequences: list[list[int]]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": key, "sequences": sequences}))
    tmp.rename(path)


def adopt_regenerated(target: TargetRunner, config: TrainConfig, data_dir: Path | None, source: Path) -> Path:
    """Make ``source``, a regen cache file written for the same target weights and prompts on
    another device or dtype, the regen data ``config`` trains on with ``target``: a short GPU window
    trains on the CPU's continuations instead of decoding them again. The file's key records
    where they came from (``adopted``). A file of other weights, prompts or length is refused."""
    prompts, key, path = regen_entry(target, config, data_dir)
    try:
        raw = json.loads(Path(source).read_text())
        theirs, sequences = raw["key"], raw["sequences"]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise JfbenchError(f"{source} is not a regen cache file ({err}): pass a train_data/regen-*.json file") from None
    differ = [k for k in ("target", "prompts", "max_new_tokens") if theirs.get(k) != key[k]]
    if differ:
        raise JfbenchError(f"{source} was regenerated with another {', '.join(differ)} than this recipe and target: "
                           "regenerate it with the same --prompts, --max-new-tokens, --data-seed and target")
    with FileLock(path.with_suffix(".lock")):
        _write_entry(path, {**key, "adopted": {k: theirs.get(k) for k in ("dtype", "device")}}, sequences)
    return path


def _common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix: the prompt's tokens inside prompt + answer, where the
    tokenizer may merge across the boundary."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _joined(pair: Pair) -> str:
    """Prompt + the corpus' answer, with one space where the prompt does not end in whitespace."""
    gap = "" if pair.prompt[-1:].isspace() else " "
    return pair.prompt + gap + pair.reference


def frequent_tokens(samples: list[Sample], count: int, vocab: int) -> torch.Tensor:
    """The ``count`` most frequent continuation tokens of ``samples`` (ties: lower id first), as
    ascending target ids (N,): a head's draft vocabulary. Tokens never seen fill any rest by id."""
    if not 1 <= count < vocab:
        raise JfbenchError(f"--draft-vocab {count} must be below the target's vocabulary of {vocab} (omit it for the whole vocabulary)")
    seen = torch.tensor([t for s in samples for t in s.tokens[s.prompt_len:]], dtype=torch.long)
    counts = torch.bincount(seen, minlength=vocab)[:vocab]
    return torch.argsort(-counts, stable=True)[:count].sort().values


def coverage(samples: list[Sample], d2t: torch.Tensor) -> float:
    """Share of the continuation tokens of ``samples`` inside the draft vocabulary ``d2t``."""
    seen = torch.tensor([t for s in samples for t in s.tokens[s.prompt_len:]], dtype=torch.long)
    return torch.isin(seen, d2t).float().mean().item() if len(seen) else 0.0


class SequenceBatcher:
    """Seeded draws of training samples (indices into ``samples``; `teacher.TeacherCache` builds the batch).

    A sequence is kept (cut to ``seq_len``) when it has ``min_len`` tokens and at least one
    continuation token left after the cut. The last ``heldout`` kept samples (at most a fifth of
    them) are held out for the acceptance proxy and never drawn.
    """

    def __init__(self, samples: list[Sample], seq_len: int, min_len: int, heldout: int = 0) -> None:
        cut = [Sample(s.tokens[:seq_len], s.prompt_len) for s in samples]
        self.samples = [s for s in cut if len(s.tokens) >= min_len and len(s.tokens) > s.prompt_len]
        if not self.samples:
            raise JfbenchError(f"no training sequence has the {min_len} tokens and the continuation a block needs: "
                               "raise --max-new-tokens or --seq-len")
        self.train_count = len(self.samples) - min(heldout, len(self.samples) // 5)

    @property
    def train_samples(self) -> list[Sample]:
        return self.samples[: self.train_count]

    def heldout_picks(self) -> list[int]:
        return list(range(self.train_count, len(self.samples)))

    def draw(self, size: int, generator: torch.Generator) -> list[int]:
        return torch.randint(0, self.train_count, (size,), generator=generator).tolist()

    def token_count(self) -> int:
        """Training tokens (held-out sequences excluded)."""
        return sum(len(s.tokens) for s in self.train_samples)

    def prompt_share(self) -> float:
        """Share of the training tokens that are prompt (context for the head, never a loss target)."""
        return sum(s.prompt_len for s in self.train_samples) / max(1, self.token_count())
