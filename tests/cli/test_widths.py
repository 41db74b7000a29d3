"""Every command's output fits a 100-column terminal, and Ctrl-C is one line.

At COLUMNS=100, `suites list` printed 207 columns, `plot`'s closing note 243, `target list` 144 and
`show --wide` 251. Widths are counted in characters, stdout and stderr together.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.helpers.data_dirs import benchmark_data_dir
from tests.helpers.fixtures_runs import write_fixture_run

WIDTH = 100


@pytest.fixture
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fixture_run(tmp_path_factory.mktemp("w") / "run-with-a-rather-long-folder-name", drafters=("ngram", "jetflow"),
                             suites=("gsm8k",), batch_sizes=(1,))


@pytest.mark.parametrize("args", [
    ["suites", "list", "--data-dir", "{data}"], ["target", "list"], ["show", "{run}"], ["show", "{run}", "--wide"],
    ["show", "{run}", "--columns", "tau,alpha,tok_s,tpot,ttft,decode,e2e,accuracy,diverged,other,a_1,p_2,p_3"],
    ["plot", "{run}", "--out", "{tmp}/figures"], ["report", "{run}", "--out", "{tmp}/report.html"],
    ["sweep", "--help"], ["demo", "--help"], ["show", "--help"], ["check", "{run}"],
])
def test_output_fits_100_columns(cli, monkeypatch, tmp_path: Path, run: Path, args: list[str]) -> None:
    # Bug: tables printed at their natural width and notes on one line, whatever the terminal.
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    monkeypatch.setenv("JFBENCH_CACHE", str(tmp_path / "cache"))
    filled = [a.format(run=run, tmp=tmp_path, data=benchmark_data_dir()) for a in args]
    code, out, err = cli(*filled)
    assert code in (0, 1), err  # check exits 1: the fixture is not the CI baseline
    lines = (out + err).splitlines()
    assert lines and max(len(line) for line in lines) <= WIDTH, max(lines, key=len)


def test_a_folded_table_keeps_every_value_whole(cli, monkeypatch, run: Path) -> None:
    # Bug caught: fitting the width by cutting values to "…" instead of folding the columns.
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    code, out, _ = cli("show", str(run), "--wide")
    assert code == 0 and "…" not in out and "(continued)" in out
    assert "chosen B" in out and "decode × [95% CI]" in out  # the last and a middle column both shown


def test_ctrl_c_is_one_line_saying_how_to_resume(cli, monkeypatch, tmp_path: Path) -> None:
    # Bug: Ctrl-C exited 130 with no message (and click printed a blank line).
    import jetflow_bench.sweep.driver as driver

    out = tmp_path / "run"

    def interrupted(config, folder, **kwargs):
        (folder / "cells").mkdir(parents=True)
        for name in ("a", "b"):
            (folder / "cells" / f"{name}.json").write_text("{}")
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(driver, "run_sweep", interrupted)
    (tmp_path / "config.json").write_text("{}")  # a model folder, as far as the command looks before the run
    before = signal.getsignal(signal.SIGINT)  # pytest's own, or SIG_IGN in a background job
    code, _, err = cli("sweep", "--target", str(tmp_path), "--drafters", "ngram", "--out", str(out),
                       "--data-dir", str(benchmark_data_dir()))
    assert code == 130
    assert err == "interrupted — run the same command to resume; 2 cells kept\n"
    assert signal.getsignal(signal.SIGINT) is before  # the caller's Ctrl-C handling is back


def test_sweep_help_lists_the_grid_before_the_engines(cli, monkeypatch) -> None:
    # Bug: `sweep --help` listed the vLLM options before --suites and --budgets.
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    _, out, _ = cli("sweep", "--help")
    lines = out.splitlines()
    listed = lines[next(i for i, line in enumerate(lines) if line.startswith("  --target ")):]  # the option list
    options = [line.split()[0] for line in listed if line.startswith("  --")]
    order = ["--target", "--out", "--drafters", "--suites", "--budgets", "--batch-sizes", "--repeats", "--device",
             "--engine", "--vllm-bin", "--allow-other-target"]
    assert [o for o in options if o in order] == order
