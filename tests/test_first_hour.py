"""What a new user meets in the first hour: the demo without data, and the small rough edges.

Each test names the bug it catches in its first comment.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures_runs import write_fixture_run


@pytest.fixture
def no_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JFBENCH_DATA_DIR", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_demo_without_data_shows_its_finished_run(cli, no_data, tmp_path: Path) -> None:
    # Bug: a demo re-run without the data folder refuses although every result is on disk.
    out = write_fixture_run(tmp_path / "demo", drafters=("ngram",), suites=("gsm8k",), batch_sizes=(1,))
    code, stdout, err = cli("demo", "--out", str(out))
    assert code == 0, err
    assert "showing the demo finished in" in err and "--data-dir" in err
    assert "ngram" in stdout and "decode × [95% CI]" in stdout


def test_demo_without_data_or_results_stops_before_training(cli, no_data, tmp_path: Path, monkeypatch) -> None:
    # Bug: the demo trains a toy target for minutes, then finds it has no prompts to decode.
    import jetflow_bench.toy as toy

    monkeypatch.setattr(toy, "ensure_toy_target", lambda *a, **k: pytest.fail("trained without prompts"))
    code, _, err = cli("demo", "--out", str(tmp_path / "fresh"))
    assert code == 2 and "no data for suite 'gsm8k'" in err and "None/" not in err
    assert not (tmp_path / "fresh").exists()
