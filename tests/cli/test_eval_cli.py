"""`jfbench eval` usage errors: one line on stderr, exit code 2, before any model runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.helpers.data_dirs import benchmark_data_dir


def assert_usage_error(result: tuple[int, str, str], *words: str) -> None:
    code, _, err = result
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err  # one line, no traceback
    for word in words:
        assert word in err


def test_lm_eval_not_installed(cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Bug: an ImportError traceback instead of the install hint.
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # `import lm_eval` now raises ImportError
    assert_usage_error(cli("eval", "--target", "t", "--data-dir", str(tmp_path)), "lm-eval is not installed", "[eval]")


def test_missing_data_dir(cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    pytest.importorskip("lm_eval")
    monkeypatch.delenv("JFBENCH_DATA_DIR", raising=False)
    assert_usage_error(cli("eval", "--target", "t"), "JFBENCH_DATA_DIR")
    assert_usage_error(cli("eval", "--target", "t", "--data-dir", str(tmp_path / "nope")), "does not exist")


def test_unknown_task(cli) -> None:
    pytest.importorskip("lm_eval")
    data = benchmark_data_dir()
    args = ("eval", "--target", "t", "--data-dir", str(data), "--limit", "1")  # fails before any model loads
    assert_usage_error(cli(*args, "--tasks", "gsm8kk"), "unknown task 'gsm8kk'", "did you mean 'gsm8k'")
    assert_usage_error(cli(*args, "--tasks", "mt_bench"), "has no harness task")  # a suite without one
    # Code tasks run model output: the harness's opt-in is asked for up front, not as a traceback.
    assert_usage_error(cli(*args, "--tasks", "gsm8k,mbpp"), "--confirm-run-unsafe-code")


def test_bad_sampling_flags(cli, tmp_path: Path) -> None:
    # Bug: a negative temperature or an empty nucleus reaches the harness (a traceback after the model loads).
    pytest.importorskip("lm_eval")
    args = ("eval", "--target", "t", "--data-dir", str(tmp_path))
    assert_usage_error(cli(*args, "--temperature", "-1"), "--temperature -1")
    assert_usage_error(cli(*args, "--temperature", "1", "--top-p", "0"), "--top-p 0")


@pytest.mark.slow
def test_compare_plain_writes_the_run_folder_and_prints_both_scores(cli, micro_target: Path, tmp_path: Path) -> None:
    # Bug: the arms' outputs go missing or the comparison reads the wrong arm (identical by construction).
    pytest.importorskip("lm_eval")
    data = benchmark_data_dir()
    out = tmp_path / "run"
    code, stdout, err = cli(
        "eval", "--target", str(micro_target), "--drafter", "ngram", "--budget", "16", "--tasks", "gsm8k",
        "--limit", "3", "--max-gen-toks", "24", "--data-dir", str(data), "--device", "cpu", "--compare-plain",
        "--strict", "--out", str(out),
    )
    assert code == 0, err
    assert "plain decoding" in stdout and "same generations" in stdout
    for arm in ("speculative", "plain"):
        assert (out / arm / "results.json").is_file() and (out / arm / "samples_jfbench_gsm8k_chat.jsonl").is_file()
    (row,) = json.loads((out / "eval.json").read_text())["rows"]
    assert row["task"] == "jfbench_gsm8k_chat" and row["arm"] == "speculative"
    assert row["score"] == row["plain_score"] and (row["same_generations"], row["generations"]) == (3, 3)
    assert row["tau"] > 1.0
    plain = json.loads((out / "plain" / "speculation.json").read_text())
    assert plain["model"]["drafter"] == "none" and plain["tasks"][0]["tau"] == 1.0
