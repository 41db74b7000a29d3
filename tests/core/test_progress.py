"""Progress in a log (stderr not a terminal): long steps must say how far they are, at a bounded rate."""

from jetflow_bench.core import progress
from jetflow_bench.core.progress import CountProgress, SweepProgress


def test_count_progress_logs_a_line_per_twentieth_and_the_last(capsys):
    with CountProgress("teacher", 200) as bar:
        for _ in range(100):
            bar.advance(2)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 20  # 10, 20, ..., 200: a line per twentieth, not per item
    assert lines[0].startswith("teacher 10/200") and lines[-1].startswith("teacher 200/200")
    assert "ETA" in lines[0]


def test_count_progress_big_advances_print_once_each(capsys):
    with CountProgress("regen", 40) as bar:
        bar.advance(16)  # crosses eight line marks at once
        bar.advance(16)
        bar.advance(8)
    assert [line.split()[1] for line in capsys.readouterr().err.splitlines()] == ["16/40", "32/40", "40/40"]


def test_disabled_progress_is_silent(capsys):
    with CountProgress("teacher", 10, enabled=False) as bar:
        bar.advance(10)
    with SweepProgress(1, 0, enabled=False) as sweep:
        sweep.start("cell", 2)
        sweep.advance(1, 5)
        sweep.end_cell("c")
    assert capsys.readouterr().err == ""


def test_sweep_progress_reports_rounds_of_a_long_repeat(capsys, monkeypatch):
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)
    with SweepProgress(1, 0) as sweep:
        sweep.start("gsm8k B256 r0", 3)
        for _ in range(3):
            sweep.advance(1, 100)
        sweep.end_cell("gsm8k/b256")
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(",")[0].strip() for line in lines[:2]] == ["gsm8k B256 r0: round 1/3", "gsm8k B256 r0: round 2/3"]
    assert lines[2].startswith("[1/1] gsm8k/b256") and len(lines) == 3  # the last round is the cell's own line


def test_sweep_progress_rate_limits_its_lines(capsys):
    with SweepProgress(1, 0) as sweep:  # rounds faster than LOG_EVERY_S: only the cell line
        sweep.start("cell", 5)
        for _ in range(5):
            sweep.advance(1, 10)
        sweep.end_cell("c")
    assert len(capsys.readouterr().err.splitlines()) == 1
