"""What a new user meets in the first hour: the demo without data, and the small rough edges.

Each test names the bug it catches in its first comment.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.fixtures_runs import write_fixture_run


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
    assert "ngram" in stdout and "τ" in stdout and "decode" not in stdout  # the quick demo: τ, no speed-ups
    code, stdout, err = cli("demo", "--full", "--out", str(out))
    assert code == 0 and "decode × [95% CI]" in stdout, err


def test_the_quick_demo_says_how_long_it_takes_before_it_trains(cli, tmp_path: Path, monkeypatch) -> None:
    # Bug: the demo ran for 18 minutes with no estimate, on the micro target and 9 cells.
    import jetflow_bench.toy as toy
    from jetflow_bench.core.errors import JfbenchError
    from tests.helpers.data_dirs import benchmark_data_dir

    def stop(preset, *args, **kwargs):
        raise JfbenchError(f"stopped before training {preset}")

    monkeypatch.setattr(toy, "ensure_toy_target", stop)
    code, _, err = cli("demo", "--out", str(tmp_path / "demo"), "--data-dir", str(benchmark_data_dir()))
    first, last = err.strip().splitlines()
    assert code == 2 and "quick demo on 2 CPU cores: under 1 min from an empty cache" in first
    assert last == "error: stopped before training nano"
    code, _, err = cli("demo", "--full", "--out", str(tmp_path / "demo"), "--data-dir", str(benchmark_data_dir()))
    assert "full demo on 2 CPU cores: about 18 min" in err and err.strip().endswith("stopped before training micro")


def test_demo_without_data_or_results_stops_before_training(cli, no_data, tmp_path: Path, monkeypatch) -> None:
    # Bug: the demo trains a toy target for minutes, then finds it has no prompts to decode.
    import jetflow_bench.toy as toy

    monkeypatch.setattr(toy, "ensure_toy_target", lambda *a, **k: pytest.fail("trained without prompts"))
    code, _, err = cli("demo", "--out", str(tmp_path / "fresh"))
    assert code == 2 and "no data for suite 'gsm8k'" in err and "None/" not in err
    assert not (tmp_path / "fresh").exists()


def test_a_learned_arm_without_its_head_is_refused_before_anything_runs(cli, tmp_path: Path) -> None:
    # Bug: `--drafters jetflow` ran the AR cells first, then said "pass --checkpoint DIR", an option
    # `sweep` does not have; the arm syntax is jetflow=DIR.
    out = tmp_path / "run"
    code, _, err = cli("sweep", "--target", str(tmp_path), "--drafters", "ngram,jetflow", "--out", str(out))
    assert code == 2 and "jetflow=DIR" in err and "--checkpoint" not in err
    assert not out.exists()


def test_a_head_that_does_not_load_stops_the_sweep_before_the_first_cell(cli, capsys, tmp_path: Path) -> None:
    # Bugs: a bad head folder was found only when its cell came up, after the AR cells ran; a refused
    # start left an empty --out folder behind.
    from tests.helpers.data_dirs import benchmark_data_dir
    from tests.helpers.random_models import save_random_model

    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text("{}")
    out, target = tmp_path / "run", save_random_model(tmp_path / "target")
    capsys.readouterr()  # the model's own saving output
    code, _, err = cli("sweep", "--target", str(target), "--drafters",
                       f"ngram,jetflow={head}", "--out", str(out), "--suites", "gsm8k", "--budgets", "4",
                       "--limit", "2", "--max-new-tokens", "4", "--repeats", "1", "--data-dir", str(benchmark_data_dir()),
                       "--no-progress")
    assert code == 2 and str(head) in err and len(err.strip().splitlines()) == 1
    assert not out.exists()  # no AR cell, no manifest, no empty folder


def test_third_party_progress_bars_are_off_under_the_cli() -> None:
    # Bug: transformers' "Writing model shards" tqdm bar interleaved with jfbench's own progress.
    import subprocess
    import sys

    script = ("import sys; sys.argv = ['jfbench', '--help']\n"
              "from jetflow_bench.cli import main\n"
              "try:\n    main()\nexcept SystemExit:\n    pass\n"
              "from transformers.utils import logging\n"
              "print('BARS', logging.is_progress_bar_enabled())")
    env = {k: v for k, v in __import__("os").environ.items() if not k.endswith("DISABLE_PROGRESS_BARS")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert "BARS False" in done.stdout


def test_eta_comes_from_the_rate_measured_after_the_first_unit() -> None:
    # Bug: the first ETA counted the first (slow, warm-up) step, and rich's 30 s window knew no rate
    # when units take minutes: ETAs twice the real time, or none.
    from unittest import mock

    from rich.progress import Progress

    from jetflow_bench.core.progress import MeasuredRemainingColumn

    column = MeasuredRemainingColumn()
    with Progress(column, disable=True) as bar:
        task_id = bar.add_task("t", total=10)
        task = bar.tasks[0]
        with mock.patch("jetflow_bench.core.progress.time.perf_counter", return_value=100.0):
            assert column.render(task).plain == "-"  # nothing finished: no rate yet
            bar.update(task_id, completed=1)  # the first unit took long (warm-up); not a rate
            assert column.render(task).plain == "-"
        with mock.patch("jetflow_bench.core.progress.time.perf_counter", return_value=130.0):
            bar.update(task_id, completed=4)  # 3 units in 30 s after the first: 10 s each
            assert column.render(task).plain == "0:01:00"  # 6 left


def test_plot_format_pdf_points_to_formats(cli, tmp_path: Path) -> None:
    # Bug: `plot --format pdf` said "'pdf' is not one of 'text', 'json'" without naming --formats.
    run = write_fixture_run(tmp_path / "run", drafters=("ngram",), suites=("gsm8k",), batch_sizes=(1,))
    code, _, err = cli("plot", str(run), "--format", "pdf")
    assert code == 2 and "--formats pdf" in err and len(err.strip().splitlines()) == 1


def test_check_takes_the_run_positionally_and_says_first_when_configs_differ(cli, tmp_path: Path) -> None:
    # Bugs: `check RUN` was "missing option '--run'" while `show RUN` is positional; a run of another
    # config reported failures with the one explaining line buried among warnings, and no way to
    # make a comparable run.
    base = write_fixture_run(tmp_path / "base", drafters=("ngram",), suites=("gsm8k",), batch_sizes=(1,), seed=0)
    (base / "reproduce.py").write_text("# the command behind this reference\n")
    run = write_fixture_run(tmp_path / "run", drafters=("ngram",), suites=("gsm8k",), batch_sizes=(1,), seed=1)
    code, _, err = cli("check", str(run), "--baseline", str(base))
    assert code in (0, 1)
    assert err.splitlines()[0].startswith("note: the run's config") and f"python {base / 'reproduce.py'}" in err
    assert cli("check", "--run", str(run), "--baseline", str(base))[0] == code  # the option still works
    code, _, err = cli("check", str(base), "--baseline", str(base))
    assert code == 0 and "config" not in err  # same config: no note
    code, _, err = cli("check", "--baseline", str(base))
    assert code == 2 and "jfbench check results/ci-run" in err


def test_report_defaults_to_the_run_folder(cli, tmp_path: Path, monkeypatch) -> None:
    # Bug: `report RUN` wrote ./reports/NAME.html relative to wherever it was started.
    run = write_fixture_run(tmp_path / "run", drafters=("ngram",), suites=("gsm8k",), batch_sizes=(1,))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, out, err = cli("report", str(run))
    assert code == 0, err
    assert Path(out.strip()) == run / "report.html" and (run / "report.html").is_file()
    assert not any(elsewhere.iterdir())
