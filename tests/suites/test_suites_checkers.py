"""Suites: answer checkers (math normalisation, GSM8K/MATH/AIME, HumanEval/MBPP by execution)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from suites import get_suite
from suites.code_suites import extract_code
from suites.math_answers import (
    extract_integer_answer,
    extract_number_answer,
    last_boxed,
    math_answers_equal,
    normalize_math_answer,
)
from tests.helpers.benchmark_data import DataFacts

Folder = tuple[Path, DataFacts]  # the `data_folder` fixture: made-up, and real where JFBENCH_DATA_DIR is set


@pytest.mark.parametrize(
    ("predicted", "reference"),
    [
        ("1/2", r"\frac{1}{2}"),
        (r"\dfrac{1}{2}", r"\frac{1}{2}"),
        (r"\tfrac12", r"\frac{1}{2}"),
        ("0.5", r"\frac{1}{2}"),
        ("5.0", "5"),
        ("12.00", "12"),
        (r"(3, \frac{\pi}{2})", r"\left( 3, \frac{\pi}{2} \right)"),
        ("90", r"90^\circ"),
        (r"90^{\circ}", "90"),
        ("90°", "90"),
        (r"5\text{ cm}", "5"),
        ("864", r"864 \mbox{ inches}^2"),
        ("5 square units", "5"),
        (r"x = 5", "5"),
        ("(C)", r"\text{(C)}"),
        ("1,000", "1000"),
        (r"10,\!080", "10080"),
        (r"\$18.90", "18.90"),
        ("2 \\sqrt{3}", "2\\sqrt3"),
        ("  -7 ", "-7"),
        (".5", "0.5"),
    ],
)
def test_equivalent_math_answers_match(predicted: str, reference: str) -> None:
    assert math_answers_equal(predicted, reference)


@pytest.mark.parametrize(
    ("predicted", "reference"),
    [
        ("1/3", r"\frac{1}{2}"),
        ("0.33", r"\frac{1}{3}"),
        ("51", "5"),
        ("2x", "2"),
        ("(3,2)", "(2,3)"),
        ("B", "C"),
    ],
)
def test_different_math_answers_do_not_match(predicted: str, reference: str) -> None:
    assert not math_answers_equal(predicted, reference)


def test_answer_extraction() -> None:
    assert (
        last_boxed(r"so \boxed{\frac{1}{2}} and finally \boxed{\left\{ 1, 2 \right\}}.")
        == r"\left\{ 1, 2 \right\}"
    )
    assert last_boxed(r"The answer is \boxed 7$.") == "7"
    assert last_boxed("no box") is None and last_boxed(r"\boxed{unclosed") is None
    assert normalize_math_answer(r"\frac1{72}") == r"\frac{1}{72}"
    assert extract_number_answer("She pays $1,234.50 in total. The answer is 1,234.5 dollars.") == "1234.5"
    assert extract_number_answer("3 apples, then 4 more: 7") == "7"
    assert extract_number_answer(r"... \boxed{\$18}") == "18"
    assert extract_integer_answer(r"\boxed{070}") == 70
    assert extract_integer_answer(r"\boxed{1000}") is None and extract_integer_answer("no number") is None


def test_code_is_taken_from_the_first_fence() -> None:
    assert extract_code("Here:\n```python\ndef f():\n    return 1\n```\nDone.") == "def f():\n    return 1\n"
    assert extract_code("```\nx = 1\n") == "x = 1\n"
    assert extract_code("    return 1\n") == "    return 1\n"


def test_gsm8k_accepts_every_reference_and_rejects_a_perturbed_one(data_folder: Folder) -> None:
    suite = get_suite("gsm8k")
    for record in suite.load(data_folder[0]):
        worked = record.fields["answer"]
        final = suite.reference(record.fields)
        assert suite.check(record, worked), record.id
        assert suite.check(record, f"Thinking... the answer is \\boxed{{{final}}}."), record.id
        wrong = re.sub(r"####.*$", f"#### {int(float(final)) + 1}", worked)
        assert not suite.check(record, wrong), record.id


def test_math500_accepts_every_reference_and_rejects_a_perturbed_one(data_folder: Folder) -> None:
    suite = get_suite("math500")
    for record in suite.load(data_folder[0]):
        answer = record.fields["answer"]
        assert suite.check(record, f"We find that the result is $\\boxed{{{answer}}}$."), record.id
        assert not suite.check(record, f"$\\boxed{{{answer}1}}$"), record.id
        assert not suite.check(record, f"the answer is {answer}"), record.id  # nothing boxed


@pytest.mark.parametrize("name", ["aime25", "aime24"])
def test_aime_accepts_every_reference_and_rejects_a_perturbed_one(name: str, data_folder: Folder) -> None:
    suite = get_suite(name)
    for record in suite.load(data_folder[0]):
        answer = int(record.fields["answer"])
        assert suite.check(record, f"... so $N = \\boxed{{{answer:03d}}}$"), record.id
        assert suite.check(record, f"The final answer is {answer}."), record.id
        assert not suite.check(record, f"\\boxed{{{(answer + 1) % 1000}}}"), record.id


def test_every_humaneval_canonical_solution_passes_and_wrong_ones_fail(data_folder: Folder) -> None:
    suite = get_suite("humaneval")
    records = suite.load(data_folder[0]).records
    assert suite.check_many([(r, r.fields["canonical_solution"]) for r in records]) == [True] * len(records)
    wrong = [(r, "    return None\n") for r in records[::16]]
    assert suite.check_many(wrong) == [False] * len(wrong)


def test_humaneval_chat_reply_with_a_whole_function_is_checked(data_folder: Folder) -> None:
    # Bug caught: the checker runs the canonical solution, or the prompt's stub, instead of the reply's function.
    suite = get_suite("humaneval")
    record = suite.load(data_folder[0], limit=1).records[0]
    body = record.fields["canonical_solution"]
    header = record.fields["prompt"].split("def ")[-1].split("\n")[0]
    reply = f"Sure:\n```python\ndef {header}\n{body}```\nThis works because..."
    assert suite.check(record, reply)
    assert not suite.check(record, reply.replace(body, "    return None\n"))


def mbpp_reference_results(name: str, data: Path, limit: int | None) -> list[bool | None]:
    suite = get_suite(name, timeout_s=60.0)  # some references (e.g. task 123) run for seconds on 2 busy cores
    records = suite.load(data, limit=limit, sample_seed=0 if limit else None).records
    return suite.check_many([(r, r.fields["code"]) for r in records])


def test_mbpp_references_pass_on_a_sample_and_where_setup_code_needs_them(data_folder: Folder) -> None:
    data, facts = data_folder
    sample = min(40, facts.counts["mbpp"])
    assert mbpp_reference_results("mbpp", data, limit=sample) == [True] * sample
    suite = get_suite("mbpp")
    setup_tasks = [r for r in suite.load(data) if r.id in facts.setup_tasks]  # test setup builds the solution's Node
    assert len(setup_tasks) == len(facts.setup_tasks)
    assert suite.check_many([(r, r.fields["code"]) for r in setup_tasks]) == [True] * len(setup_tasks)
    assert suite.check_many([(r, "def unrelated():\n    pass\n") for r in setup_tasks]) == [False] * len(setup_tasks)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mbpp", "mbpp-sanitized"])
def test_every_mbpp_reference_passes(name: str, data_folder: Folder) -> None:
    data, facts = data_folder
    assert mbpp_reference_results(name, data, limit=None) == [True] * facts.counts[name]


@pytest.mark.parametrize("name", ["livecodebench", "mt_bench"])
def test_unscored_suites_say_why_and_return_none(name: str) -> None:
    from suites import Record

    suite = get_suite(name)
    assert not suite.scored and suite.unscored_reason
    record = Record(name, "1", {"turns": ["q", "q2"], "prompt": "p"})
    assert suite.check(record, "anything") is None
    assert suite.check_many([(record, "a"), (record, "b")]) == [None, None]
