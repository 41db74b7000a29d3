"""Math suites: GSM8K, MATH-500, AIME 2025 and AIME 2024 (answer checked, see `math_answers`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from suites.base import Record, Suite
from suites.math_answers import (
    extract_integer_answer,
    extract_number_answer,
    last_boxed,
    math_answers_equal,
    numbers_equal,
)
from suites.sources import DataSpec, HubSource

# The instruction Qwen-style chat models are evaluated with; it makes the answer extractable.
BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


class MathSuite(Suite):
    """Chat: the problem plus `BOXED_INSTRUCTION`. Plain: "Problem: ...\\nSolution:"."""

    problem_field: ClassVar[str] = "problem"
    plain_stop = ("\nProblem:",)

    def user_message(self, record: Record) -> str:
        return f"{record.fields[self.problem_field]}\n{BOXED_INSTRUCTION}"

    def plain_prompt(self, record: Record) -> str:
        return f"Problem: {record.fields[self.problem_field]}\nSolution:"


class GSM8K(MathSuite):
    """Grade-school word problems; the reference is the number after "####" in the worked answer."""

    name = "gsm8k"
    data = DataSpec("gsm8k/test.jsonl", HubSource("openai/gsm8k", configs=("main",)))
    required = {"question": str, "answer": str}
    problem_field = "question"
    plain_stop = ("\nQuestion:",)

    def plain_prompt(self, record: Record) -> str:
        return f"Question: {record.fields['question']}\nAnswer:"

    @staticmethod
    def reference(fields: Mapping[str, Any]) -> str | None:
        return extract_number_answer(fields["answer"]) if "####" in fields["answer"] else None

    def invalid_reason(self, fields: Mapping[str, Any]) -> str | None:
        return None if self.reference(fields) else "field 'answer' has no final '#### <number>' line"

    def check(self, record: Record, completion: str) -> bool:
        return numbers_equal(extract_number_answer(completion), self.reference(record.fields) or "")


class MATH500(MathSuite):
    """The 500-problem MATH test subset; the last ``\\boxed{}`` is compared after normalisation."""

    name = "math500"
    data = DataSpec("math500/test.jsonl", HubSource("HuggingFaceH4/MATH-500"))
    required = {"problem": str, "answer": str, "unique_id": str}
    id_field = "unique_id"

    def check(self, record: Record, completion: str) -> bool:
        boxed = last_boxed(completion)
        return boxed is not None and math_answers_equal(boxed, record.fields["answer"])


class AIME(MathSuite):
    """AIME answers are integers 0-999; long reasoning needs a longer generation budget."""

    required = {"problem": str, "answer": (str, int), "id": (str, int)}
    id_field = "id"
    default_max_new_tokens = 1024

    def invalid_reason(self, fields: Mapping[str, Any]) -> str | None:
        answer = str(fields["answer"]).strip()
        return None if answer.isdigit() and int(answer) <= 999 else "field 'answer' is not an integer 0-999"

    def check(self, record: Record, completion: str) -> bool:
        return extract_integer_answer(completion) == int(record.fields["answer"])


class AIME25(AIME):
    name = "aime25"
    data = DataSpec(
        "aime2025/test.jsonl",
        HubSource("opencompass/AIME2025", configs=("AIME2025-I", "AIME2025-II")),
    )

    def from_hub(self, row: dict, index: int) -> dict:
        return {"id": str(index), "problem": row["question"], "answer": row["answer"]}


class AIME24(AIME):
    name = "aime24"
    data = DataSpec("aime2024/test.jsonl", HubSource("HuggingFaceH4/aime_2024", splits=("train",)))
