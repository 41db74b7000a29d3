"""The suite contract: load records, turn them into decode requests, check completions.

A suite is a class registered in ``suites.SUITES``; the engine only ever calls the methods below, so a
new benchmark plugs in without touching it. The prompt of every request is the exact text the model
sees (chat template already applied), so results can store it and a run can be reproduced.
"""

from __future__ import annotations

import logging
import random
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from jetflow_bench.core.errors import JfbenchError
from suites.sources import DataSpec, Unparsable, locate

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Record:
    """One benchmark item as loaded (hub rows already mapped onto the file's field names)."""

    suite: str
    id: str  # the source's own id (task_id, unique_id, ...) or the position in the file
    fields: Mapping[str, Any]  # the original fields


@dataclass(frozen=True)
class Request:
    """What the engine decodes for one record (and one turn of a multi-turn suite)."""

    suite: str
    record_id: str
    prompt: str  # exact model input text, chat template applied
    max_new_tokens: int
    stop: tuple[str, ...]  # strings that end a plain completion; chat prompts end at the template's EOS
    turn: int = 1

    def cut(self, text: str) -> str:
        """``text`` up to (not including) the earliest stop string."""
        ends = [i for i in (text.find(s) for s in self.stop) if i >= 0]
        return text[: min(ends)] if ends else text


@dataclass(frozen=True)
class LoadedSuite:
    """The selected records plus where they came from."""

    suite: str
    records: tuple[Record, ...]
    kind: str  # "path", "hub" or "package"
    source: str  # the file, "hub:<dataset>" or "package:<name>"
    total: int  # valid records in the source, before limit / sampling
    skipped: int = 0  # malformed records skipped because skip_bad=True

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)


class BadRecord(ValueError):
    """A record that cannot be used; the message starts with its location."""


def has_chat_template(tokenizer: PreTrainedTokenizerBase | None) -> bool:
    return tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))


def render_chat(tokenizer: PreTrainedTokenizerBase | None, messages: list[dict[str, str]], plain: str) -> str:
    """The chat-template text for ``messages`` (thinking off, generation prompt on), else ``plain``."""
    if tokenizer is None or not has_chat_template(tokenizer):
        return plain
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )


def select_subset(
    records: Sequence[Record], limit: int | None, sample_seed: int | None
) -> tuple[Record, ...]:
    """No seed: the first ``limit``. A seed: a seeded random sample, kept in file order."""
    if limit is None:
        return tuple(records)
    if limit < 1:
        raise JfbenchError(f"--limit {limit} must be at least 1 (or leave it out for every record)")
    if sample_seed is None:
        return tuple(records[:limit])
    chosen = random.Random(sample_seed).sample(range(len(records)), min(limit, len(records)))
    return tuple(records[i] for i in sorted(chosen))


class Suite(ABC):
    """One benchmark: its data, its prompt format, its generation length and its answer checker."""

    name: ClassVar[str]
    data: ClassVar[DataSpec]
    required: ClassVar[Mapping[str, type | tuple[type, ...]]]  # field -> accepted JSON type(s)
    id_field: ClassVar[str | None] = None  # None: the record's position in the source is its id
    scored: ClassVar[bool] = True
    unscored_reason: ClassVar[str] = ""  # why check() returns None, when scored is False
    executes_code: ClassVar[bool] = False  # check() runs model output (in `suites.sandbox`)
    default_max_new_tokens: ClassVar[int] = 512
    plain_stop: ClassVar[tuple[str, ...]] = ()  # stops for plain (non-chat) prompts
    turns: int = 1  # user turns per record; multi-turn suites build later turns with next_turn

    # -- data ---------------------------------------------------------------------------------------
    def load(
        self,
        data_dir: Path | None = None,
        *,
        limit: int | None = None,
        sample_seed: int | None = None,
        skip_bad: bool = False,
    ) -> LoadedSuite:
        """Records from the first source that has them (see `suites.sources`), validated.

        A malformed record raises `JfbenchError` naming file, line and problem, unless ``skip_bad``:
        then it is left out, counted in ``LoadedSuite.skipped`` and logged.
        """
        raw = locate(self.data, self.name, data_dir, self.from_hub)
        records: list[Record] = []
        problems: list[str] = []
        seen: set[str] = set()
        for index, (where, value) in enumerate(raw.rows):
            try:
                record = self._record(where, index, value)
                if record.id in seen:
                    raise BadRecord(f"{where}: duplicate id {record.id!r}")
            except BadRecord as bad:
                if not skip_bad:
                    raise JfbenchError(f"{bad}; fix the data or pass --skip-bad to skip bad records") from bad
                problems.append(str(bad))
                continue
            seen.add(record.id)
            records.append(record)
        if problems:
            logger.warning("%s: skipped %d bad record(s); first: %s", self.name, len(problems), problems[0])
        return LoadedSuite(
            self.name,
            select_subset(records, limit, sample_seed),
            raw.kind,
            raw.source,
            len(records),
            len(problems),
        )

    def _record(self, where: str, index: int, value: Any) -> Record:
        if isinstance(value, Unparsable):
            raise BadRecord(f"{where}: {value.reason}")
        if not isinstance(value, dict):
            raise BadRecord(f"{where}: expected a JSON object, got {type(value).__name__}")
        for field, kind in self.required.items():
            if field not in value:
                raise BadRecord(
                    f"{where}: missing field {field!r} (a {self.name} record needs {', '.join(self.required)})"
                )
            if not isinstance(value[field], kind) or isinstance(value[field], bool):  # JSON true is no int
                raise BadRecord(
                    f"{where}: field {field!r} is {type(value[field]).__name__}, expected {_type_names(kind)}"
                )
        problem = self.invalid_reason(value)
        if problem:
            raise BadRecord(f"{where}: {problem}")
        record_id = str(value[self.id_field]) if self.id_field else str(index)
        return Record(self.name, record_id, value)

    def invalid_reason(self, fields: Mapping[str, Any]) -> str | None:
        """What is wrong with a record beyond missing fields and types (None: nothing)."""
        return None

    def from_hub(self, row: dict, index: int) -> dict | None:
        """Map a hub row onto the file's field names; None drops it (e.g. outside a release window)."""
        return row

    # -- prompts ------------------------------------------------------------------------------------
    @abstractmethod
    def user_message(self, record: Record) -> str:
        """The user turn for chat models (it goes through the tokenizer's chat template)."""

    @abstractmethod
    def plain_prompt(self, record: Record) -> str:
        """The completion prompt for base / toy models without a chat template."""

    def format_prompt(self, record: Record, tokenizer: PreTrainedTokenizerBase | None) -> str:
        """The exact model input for ``record``: chat template when ``tokenizer`` has one, else plain."""
        messages = [{"role": "user", "content": self.user_message(record)}]
        return render_chat(tokenizer, messages, self.plain_prompt(record))

    def stop_for(self, tokenizer: PreTrainedTokenizerBase | None) -> tuple[str, ...]:
        return () if has_chat_template(tokenizer) else self.plain_stop

    def make_request(
        self,
        record: Record,
        prompt: str,
        tokenizer: PreTrainedTokenizerBase | None,
        max_new_tokens: int | None = None,
        turn: int = 1,
    ) -> Request:
        """A request for ``prompt`` with this suite's length (unless overridden) and stop strings."""
        tokens = self.default_max_new_tokens if max_new_tokens is None else max_new_tokens
        if tokens < 1:
            raise JfbenchError(f"--max-new-tokens {tokens} must be at least 1")
        return Request(self.name, record.id, prompt, tokens, self.stop_for(tokenizer), turn)

    def requests(
        self,
        records: Sequence[Record] | LoadedSuite,
        tokenizer: PreTrainedTokenizerBase | None,
        max_new_tokens: int | None = None,
    ) -> list[Request]:
        """First-turn requests, one per record, in record order."""
        return [
            self.make_request(r, self.format_prompt(r, tokenizer), tokenizer, max_new_tokens) for r in records
        ]

    def next_turn(
        self,
        record: Record,
        answers: Sequence[str],
        tokenizer: PreTrainedTokenizerBase | None,
        max_new_tokens: int | None = None,
    ) -> Request | None:
        """The request for the turn after ``answers`` (the model's own replies so far); None when done."""
        return None

    # -- checking -----------------------------------------------------------------------------------
    @abstractmethod
    def check(self, record: Record, completion: str) -> bool | None:
        """Whether ``completion`` (cut at the stop strings) answers ``record``; None when unscored."""

    def check_many(self, items: Sequence[tuple[Record, str]]) -> list[bool | None]:
        """`check` over many (record, completion) pairs; code suites run them in parallel."""
        return [self.check(record, completion) for record, completion in items]


def _type_names(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {str: "a string", int: "an integer", list: "a list", dict: "an object", float: "a number"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)
