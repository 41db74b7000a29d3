"""A small benchmark data folder the tests write themselves, in the `--data-dir` layout.

Tests that only need a few well-formed records of a suite (a sweep over 2-4 GSM8K prompts, a
`suites list`) read this folder when no real one is given (`JFBENCH_DATA_DIR`), so the test suite
passes on a fresh machine without any data. The records are made up here, in each benchmark's own
file format (docs/methodology.md, "Data"). `DataFacts` says what this folder and the real one hold,
so the tests of the files' contents (counts, ids, texts, reference solutions) check both.
The training sources (GSM8K's train split, MBPP's train task ids, ShareGPT) hold enough made-up
prompts for a quick head recipe (`QUICK_RECIPE`: 96 prompts), so head training runs without data.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

N_RECORDS = 12
N_TRAINING = 48  # GSM8K train prompts; MBPP and ShareGPT get half as many each
MBPP_TRAIN_FIRST = 601  # MBPP's train split is task ids 601-974 (what the head trainer reads)
MBPP_SETUP_TASK = 500  # a test-split task whose test setup builds an object of the solution's class


@dataclass(frozen=True)
class DataFacts:
    """What a benchmark data folder's files hold, for the tests of the loaders, the checkers and
    `suites list/show`: the same checks run on the made-up folder and on the real one."""

    counts: Mapping[str, int]  # records per suite
    setup_tasks: frozenset[str]  # MBPP task ids whose tests need test_setup_code run after the solution
    gsm8k_first: str  # a phrase of the first GSM8K question
    aime25_first: str  # how the first AIME 2025 prompt starts


# The real files (JFBENCH_DATA_DIR): MBPP tasks 367 and 927 build the solution's Node in their setup.
REAL_FACTS = DataFacts(
    counts={"gsm8k": 1319, "math500": 500, "aime25": 30, "aime24": 30, "humaneval": 164, "mbpp": 974,
            "mbpp-sanitized": 427, "livecodebench": 279, "mt_bench": 80},
    setup_tasks=frozenset({"367", "927"}), gsm8k_first="Janet’s ducks lay 16 eggs per day",
    aime25_first="Problem: Find the sum of all integer bases",
)
MADE_UP_FACTS = DataFacts(
    counts={**dict.fromkeys(REAL_FACTS.counts, N_RECORDS), "mbpp": N_RECORDS + 1 + N_TRAINING // 2},
    setup_tasks=frozenset({str(MBPP_SETUP_TASK)}), gsm8k_first="Tom has 3 apples in a basket",
    aime25_first="Problem: Find the remainder when 2025 is divided by 1000.",
)


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


def _word_problem(i: int) -> dict:
    """A GSM8K-shaped record of GSM8K-like length (prompt length shapes what a tiny model generates)."""
    a, b = 3 + i, 5 + 2 * i
    story = (f"Tom has {a} apples in a basket on the kitchen table. On his way home from school he stops at "
             f"the market, where apples cost two dollars each, and he buys {b} more apples with the money he "
             "saved from his weekly allowance. His sister does not eat any of them, and none of the apples "
             "are lost or given away before the evening.")
    return {"question": f"{story} How many apples does Tom have now?",
            "answer": f"Tom has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}"}


def _mbpp(i: int, task_id: int | None = None) -> dict:
    return {"task_id": 11 + i if task_id is None else task_id, "text": f"Write a function that returns its argument plus {i}.",
            "code": f"def add_{i}(x):\n    return x + {i}", "test_list": [f"assert add_{i}(1) == {1 + i}"],
            "test_setup_code": "", "challenge_test_list": []}


def _mbpp_setup_task() -> dict:
    """Like MBPP's tasks 367 and 927: the test setup builds an object of a class the solution defines."""
    return {"task_id": MBPP_SETUP_TASK, "text": "Write a class Node holding a value and a function returning it.",
            "code": "class Node:\n    def __init__(self, value):\n        self.value = value\n\n\n"
                    "def node_value(node):\n    return node.value",
            "test_list": ["assert node_value(root) == 7"], "test_setup_code": "root = Node(7)", "challenge_test_list": []}


def _chat(i: int) -> dict:
    return {"id": str(i), "conversations": [{"from": "human", "value": f"Say hello {i} times."},
                                            {"from": "gpt", "value": " ".join(["hello"] * (i + 1))}]}


def write_benchmark_data(root: Path) -> Path:
    """Write `N_RECORDS` made-up records per benchmark under ``root`` and return ``root``."""
    n = range(N_RECORDS)
    _jsonl(root / "gsm8k" / "test.jsonl", [_word_problem(i) for i in n])
    _jsonl(root / "gsm8k" / "train.jsonl", [_word_problem(100 + i) for i in range(N_TRAINING)])
    _jsonl(root / "math500" / "test.jsonl", [
        {"problem": f"What is ${i} + {i}$?", "solution": f"$\\boxed{{{2 * i}}}$", "answer": str(2 * i),
         "subject": "Algebra", "level": 1, "unique_id": f"test/algebra/{i}.json"} for i in n])
    for year in (2024, 2025):
        _jsonl(root / f"aime{year}" / "test.jsonl", [
            {"id": str(i), "problem": f"Find the remainder when {year + i} is divided by 1000.",
             "answer": str((year + i) % 1000)} for i in n])
    humaneval = [{"task_id": f"HumanEval/{i}", "prompt": f"def add_{i}(x):\n    \"\"\"Return x plus {i}.\"\"\"\n",
                  "entry_point": f"add_{i}", "canonical_solution": f"    return x + {i}\n",
                  "test": f"def check(candidate):\n    assert candidate(1) == {1 + i}\n"} for i in n]
    (root / "humaneval").mkdir(parents=True, exist_ok=True)
    (root / "humaneval" / "HumanEval.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in humaneval).encode()))
    train = range(N_TRAINING // 2)
    _jsonl(root / "mbpp" / "mbpp.jsonl",
           [_mbpp(i) for i in n] + [_mbpp_setup_task()] + [_mbpp(20 + i, MBPP_TRAIN_FIRST + i) for i in train])
    sanitized = [{"task_id": r["task_id"], "prompt": r["text"], "code": r["code"], "test_list": r["test_list"],
                  "test_imports": []} for r in map(_mbpp, n)]
    (root / "mbpp" / "sanitized-mbpp.json").write_text(json.dumps(sanitized))
    _jsonl(root / "mt_bench" / "question.jsonl", [
        {"question_id": 81 + i, "category": "writing", "turns": [f"Write a haiku about the number {i}.",
                                                                  "Now make it rhyme."]} for i in n])
    _jsonl(root / "livecodebench" / "livecodebench_v5.jsonl", [
        {"question_id": f"abc{i}_a", "contest_date": "2024-09-01T00:00:00",
         "prompt": f"Read an integer N and print N + {i}.\n\n"} for i in n])
    chats = [_chat(i) for i in range(max(N_RECORDS, N_TRAINING // 2))]
    (root / "sharegpt_chat").mkdir(parents=True, exist_ok=True)
    (root / "sharegpt_chat" / "ShareGPT_V3_unfiltered_cleaned_split.first2023.json").write_text(json.dumps(chats))
    return root
