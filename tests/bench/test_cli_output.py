"""Table output formats and the interleaved baseline benchmark's arithmetic."""

from __future__ import annotations

import json

import pytest

from jetflow_bench.bench.baseline import BaselineComparison
from tests.helpers.data_dirs import benchmark_data_dir
from tests.helpers.random_models import save_random_model

DATA = benchmark_data_dir()


@pytest.mark.parametrize("fmt", ["table", "csv", "json", "markdown"])
def test_piped_tables_never_wrap_a_cell(cli, fmt):
    code, out, err = cli("suites", "list", "--data-dir", str(DATA), "--format", fmt)
    assert code == 0, err
    names = ["gsm8k", "math500", "livecodebench", "mt_bench", "humaneval", "mbpp-sanitized"]
    for name in names:  # a wrapped cell would leave "livecodeben" / "ch" on two lines
        assert any(name in line for line in out.splitlines()), (name, out)
    if fmt == "csv":
        assert out.splitlines()[0].startswith("suite,records,found")


def test_baseline_ratio_is_the_mean_of_paired_ratios_with_a_bootstrap_ci():
    row = BaselineComparison(1, ours_tok_s=[100.0, 90.0, 300.0], theirs_tok_s=[50.0, 100.0, 100.0], same_tokens=True)
    assert row.ratios == pytest.approx([2.0, 0.9, 3.0])
    mean, lo, hi = row.ratio_ci
    assert mean == pytest.approx(5.9 / 3) and lo < 1.0 < hi  # 0.9 and 3.0 disagree on which side is faster
    assert row.verdict.startswith("no difference")
    assert BaselineComparison(1, [110.0, 120.0, 105.0], [100.0] * 3, True).verdict == "ours faster"
    assert BaselineComparison(1, [90.0, 95.0, 80.0], [100.0] * 3, True).verdict == "transformers faster"
    assert BaselineComparison(1, [90.0, 95.0, 80.0], [100.0] * 3, True, theirs="vLLM").verdict == "vLLM faster"


def test_bench_baseline_runs_interleaved_pairs(cli, tmp_path, monkeypatch):
    from jetflow_bench.cli import bench_cmd

    monkeypatch.setattr(bench_cmd, "pin_cores", lambda _cores: None)  # leave the test process unpinned
    target = save_random_model(tmp_path / "model")
    code, out, err = cli("bench", "baseline", "--target", str(target), "--data-dir", str(DATA), "--batch-sizes", "1,2",
                         "--max-new-tokens", "6", "--pairs", "3", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["batch"] for r in rows] == [1, 2] and all(r["pairs"] == 3 for r in rows)
    assert all(r["same tokens"] == "yes" for r in rows)  # same greedy tokens from both implementations
    assert all("ratio ours/transformers [95% CI]" in r for r in rows)  # the key scripts/gpu_check.py reads
