"""The engine-efficiency figure every run records: the plain step against its roofline."""

import json

import pytest

from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.report.html import render_report
from jetflow_bench.report.loading import load_run
from jetflow_bench.sweep.efficiency import efficiency_line, measure_efficiency
from tests.helpers.fixtures_runs import write_fixture_run
from tests.helpers.random_models import random_model


def figure(ratio: float, device: str = "cpu", compile: str | None = None) -> dict:
    return {"plain_step_ms": 2.0 * ratio, "roofline_ms": 2.0, "ratio": ratio, "bound": "memory", "weight_bytes": 5e8,
            "bandwidth_gb_s": 100.0, "peak_gflop_s": 900.0, "device": device, "compile": compile}


def test_measured_roofline_reads_every_weight_but_the_embedding_table():
    """Bug caught: the embedding table counted as read (one row is), which on SmolLM2 adds a fifth
    to the weight bytes and flatters the engine; or a tied LM head counted twice."""
    model = random_model("qwen3", layers=2)
    runner = TargetRunner(model, None, "random")
    eff = measure_efficiency(runner, context=16, repeats=3)
    every = sum(p.numel() * p.element_size() for p in model.parameters())
    embed = runner.embed.weight
    tied = embed is runner.lm_head.weight
    assert eff["weight_bytes"] == every - (0 if tied else embed.numel() * embed.element_size())
    assert eff["plain_step_ms"] > 0 and eff["roofline_ms"] > 0 and eff["compile"] is None
    assert eff["ratio"] == pytest.approx(eff["plain_step_ms"] / eff["roofline_ms"])
    assert runner.cache is None  # the timing's batch is released: the sweep's first cell prefills next


def test_overhead_bound_engines_are_labelled_with_the_flag_that_fixes_them():
    assert efficiency_line(None) is None
    assert "this roofline does not bind" in efficiency_line(figure(0.6))  # a model that fits the CPU's cache
    assert "overhead-bound" not in efficiency_line(figure(1.9)) and "(1.9x;" in efficiency_line(figure(1.9))
    label = "overhead-bound engine: speed-ups overstate what a compiled server would see"
    assert f"{label} (rerun with --compile)" in efficiency_line(figure(3.0))
    assert f"{label} (rerun with --graphs)" in efficiency_line(figure(8.9, "cuda:0"))
    assert "(even under --graphs)" in efficiency_line(figure(2.5, "cuda:0", "graphs"))
    assert "(rerun with --graphs)" in efficiency_line(figure(2.5, "cuda:0", "inductor"))


def test_the_report_prints_the_efficiency_under_each_run(tmp_path):
    path = write_fixture_run(tmp_path / "run", drafters=("ngram",), budgets=(16,), batch_sizes=(1,))
    manifest = json.loads((path / "manifest.json").read_text())
    (path / "manifest.json").write_text(json.dumps({**manifest, "engine_efficiency": figure(8.9, "cuda:0")}))
    html = render_report([load_run(path)])
    assert "plain step 17.80 ms vs its memory roofline 2.00 ms (8.9x" in html and "rerun with --graphs" in html
