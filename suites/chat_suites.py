"""MT-Bench: 80 two-turn chat questions; unscored (its answers are graded by an LLM judge)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from jetflow_bench.core.errors import JfbenchError
from suites.base import Record, Request, Suite, render_chat
from suites.sources import DataSpec, HubSource

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def plain_dialogue(messages: Sequence[Mapping[str, str]]) -> str:
    """A "User: ... / Assistant: ..." transcript ending where the assistant speaks next (base models)."""
    lines = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n".join(lines) + "\nAssistant:"


class MTBench(Suite):
    """First turn by default; ``turns=2`` also asks the second question after the model's own answer."""

    name = "mt_bench"
    data = DataSpec("mt_bench/question.jsonl", HubSource("HuggingFaceH4/mt_bench_prompts", splits=("train",)))
    required = {"question_id": int, "category": str, "turns": list}
    id_field = "question_id"
    scored = False
    unscored_reason = "MT-Bench answers are graded by an LLM judge, which jfbench does not run"
    plain_stop = ("\nUser:",)

    def __init__(self, *, turns: int = 1) -> None:
        if turns not in (1, 2):
            raise JfbenchError(f"mt_bench turns={turns} is not supported: use 1 or 2")
        self.turns = turns

    def invalid_reason(self, fields: Mapping[str, Any]) -> str | None:
        turns = fields["turns"]
        ok = len(turns) >= 2 and all(isinstance(t, str) and t for t in turns)
        return None if ok else "field 'turns' must be a list of at least 2 non-empty strings"

    def from_hub(self, row: dict, index: int) -> dict:
        return {"question_id": row["prompt_id"], "category": row["category"], "turns": row["prompt"]}

    def conversation(self, record: Record, answers: Sequence[str]) -> list[dict[str, str]]:
        """User turns interleaved with the model's ``answers``, ending with the next user turn."""
        messages = []
        for question, answer in zip(record.fields["turns"], answers, strict=False):
            messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        messages.append({"role": "user", "content": record.fields["turns"][len(answers)]})
        return messages

    def user_message(self, record: Record) -> str:
        return record.fields["turns"][0]

    def plain_prompt(self, record: Record) -> str:
        return plain_dialogue(self.conversation(record, []))

    def next_turn(
        self,
        record: Record,
        answers: Sequence[str],
        tokenizer: PreTrainedTokenizerBase | None,
        max_new_tokens: int | None = None,
    ) -> Request | None:
        """The second-turn request, given the model's first answer (None once ``turns`` are done)."""
        if len(answers) >= self.turns:
            return None
        messages = self.conversation(record, answers)
        prompt = render_chat(tokenizer, messages, plain_dialogue(messages))
        return self.make_request(record, prompt, tokenizer, max_new_tokens, turn=len(answers) + 1)

    def check(self, record: Record, completion: str) -> None:
        return None
