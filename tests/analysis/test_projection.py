"""The projection cost model: paper anchors, the serving trend, MoE accounting, calibration, bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.projection.cost import CostModel
from jetflow_bench.projection.hardware import resolve_hardware
from jetflow_bench.projection.project import project_run
from jetflow_bench.projection.resolve import build_cost_model
from jetflow_bench.projection.shapes import DTYPE_BYTES, head_shape, presets, target_shape
from jetflow_bench.projection.verify_cost import Calibration, fit_profile, load_calibration, write_calibration
from jetflow_bench.report.loading import load_run

REPO = Path(__file__).resolve().parents[2]
BF16 = DTYPE_BYTES["bfloat16"]
CONTEXT = int(presets()["assumptions"]["context_tokens"])
# The paper's H100 setting: Qwen3-8B, bf16, batch 1; a 5-layer JetFlow head drafting in one pass
# over one block (anchor + 15 MASK positions).
PAPER_HEAD_LAYERS, PAPER_PASSES, PAPER_ENTRIES, PAPER_TAPS = 5, 1, 16, 5


def h100_qwen8b() -> CostModel:
    return CostModel(target_shape("qwen3-8b"), resolve_hardware("h100-sxm"), BF16, CONTEXT)


def paper_speedup(model: CostModel, tau: float, budget: int, batch: int) -> float:
    head = head_shape(model.target, PAPER_HEAD_LAYERS, PAPER_TAPS)
    step = model.draft_s(head, PAPER_PASSES, PAPER_ENTRIES, batch) + model.verify_s(budget, batch)
    return tau * model.ar_s(batch) / (step + model.bookkeeping_s(budget, batch))


def test_paper_anchor_math500_within_25_percent():
    # Bug caught: a verify step that grows with the tree at batch 1 on an H100 (compute-bound by
    # mistake, e.g. peak FLOPs in the wrong unit) or a draft/overhead term off by a layer count.
    assert paper_speedup(h100_qwen8b(), tau=10.7, budget=256, batch=1) == pytest.approx(9.64, rel=0.25)


def test_paper_anchor_mt_bench_within_25_percent():
    assert paper_speedup(h100_qwen8b(), tau=4.9, budget=256, batch=1) == pytest.approx(4.58, rel=0.25)


def test_best_budget_falls_as_batch_grows():
    # The paper's serving finding: verify cost is flat in B at batch 1 (memory-bound) and linear at
    # batch 32 (compute-bound), so the best budget shrinks. Bug caught: batch ignored in the FLOPs.
    model, taus = h100_qwen8b(), {16: 5.5, 64: 8.0, 256: 10.7}

    def best(batch: int) -> int:
        return max(taus, key=lambda b: paper_speedup(model, taus[b], b, batch))

    assert best(1) == 256
    assert best(32) < 256


def test_verify_memory_bound_at_batch_1_compute_bound_at_batch_32():
    model = h100_qwen8b()
    assert model.forward(model.target, 256, 1).bound == "memory"
    assert model.forward(model.target, 256, 32).bound == "compute"
    assert model.verify_s(256, 1) < 1.1 * model.ar_s(1)  # "verifying 256 costs little more than one"


def test_moe_counts_active_parameters_for_flops_and_touched_experts_for_bytes():
    moe = target_shape("qwen3-30b-a3b")
    assert moe.experts_touched(1) == pytest.approx(8)  # one token: its 8 routed experts
    assert moe.experts_touched(4096) == pytest.approx(128, rel=1e-3)  # a big batch touches them all
    active = moe.flops(1, 1, 0) / 2  # FLOPs of one token without attention = 2 · active params
    assert 2.5e9 < active < 3.5e9  # Qwen3-30B-A3B: ~3.3B activated (minus the 0.3B embedding lookup)
    assert moe.weight_bytes(4096, 1) > 25e9 > 10 * moe.weight_bytes(1, 1) / 3  # all ~29B vs ~3B read


def test_layer_overhead_is_the_residual_of_the_published_h100_ar_rate():
    # presets.toml derives layer_overhead_s from SGLang's 158.34 tok/s (Llama-3.1-8B, H100, batch 1);
    # bug caught: a preset edited without redoing its derivation.
    h100, llama = resolve_hardware("h100-sxm"), target_shape("llama3-8b")
    residual = 1 / 158.34 - llama.weight_bytes(1, BF16) / h100.bandwidth
    assert h100.layer_overhead_s == pytest.approx(residual / llama.overhead_units(), rel=0.01)
    model = CostModel(llama, h100, BF16, context=0)
    assert 1 / model.ar_s(1) == pytest.approx(158.34, rel=0.01)


def test_docs_table_carries_every_preset_number():
    # Bug caught: presets.toml and docs/projection.md drifting apart.
    docs = (REPO / "docs" / "projection.md").read_text()
    for name, fields in presets()["hardware"].items():
        row = next((line for line in docs.splitlines() if line.startswith(f"| `{name}`")), None)
        assert row is not None, name
        numbers = {float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*\.?\d*(?:e-?\d+)?", row)}
        assert fields["memory_bandwidth"] / 1e9 in numbers, (name, "GB/s")
        assert fields["peak_flops"] / 1e12 in numbers, (name, "TFLOP/s")
        assert fields["compute_efficiency"] in numbers and fields["bandwidth_efficiency"] in numbers, name
        assert round(fields["layer_overhead_s"] * 1e6, 1) in numbers, (name, "µs")


def test_unknown_hardware_and_target_are_user_errors_naming_them():
    with pytest.raises(JfbenchError, match="'h900'"):
        resolve_hardware("h900")
    with pytest.raises(JfbenchError, match="'qwen9-8b'"):
        target_shape("qwen9-8b")
    with pytest.raises(JfbenchError, match="cpu-here"):
        build_cost_model("cpu-here", "qwen3-8b", None, None, None)


def test_user_hardware_toml(tmp_path: Path):
    path = tmp_path / "my.toml"
    fields = dict(presets()["hardware"]["h100-sxm"], memory_bandwidth=1e12, name="slow-h100")
    path.write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in fields.items()))
    profile = resolve_hardware(str(path))
    assert profile.name == "slow-h100" and profile.memory_bandwidth == 1e12
    path.write_text("name = 'broken'\npeak_flops = 1e12\n")
    with pytest.raises(JfbenchError, match="lacks"):
        resolve_hardware(str(path))


def _points(intercept: float, slope: float, flops: list[float]) -> list[dict[str, float]]:
    return [{"tokens": 2.0 ** i, "batch": 1.0, "verify_s": intercept + slope * f, "bookkeeping_s": 1e-4}
            for i, f in enumerate(flops)]


def test_fit_profile_recovers_intercept_and_rate():
    flops = [1e6, 4e6, 1.6e7, 6.4e7]
    profile = fit_profile(_points(2e-3, 1e-10, flops), flops, units=4, bandwidth=5e9, device="cpu")
    assert profile.layer_overhead_s == pytest.approx(5e-4)
    assert profile.peak_flops == pytest.approx(1e10)
    assert profile.bookkeeping_s == pytest.approx(1e-4)


def test_fit_profile_of_a_flat_forward_keeps_the_highest_rate_reached():
    # Bug caught: an overhead-bound GPU forward (time flat or falling in N, as on an H200) fitted to
    # a peak of 1 / float tiny = 4.5e307 FLOP/s, printed as such and pricing every head's work at zero.
    flops = [1e9, 4e9, 1.6e10]
    times = zip((4, 16, 64), (0.012, 0.0119, 0.0118), strict=True)
    points = [{"tokens": n, "batch": 1, "verify_s": s, "bookkeeping_s": 1e-4} for n, s in times]
    profile = fit_profile(points, flops, units=4, bandwidth=5e12, device="cuda:0")
    assert profile.peak_flops == pytest.approx(1.6e10 / 0.0118)
    assert profile.layer_overhead_s > 0


def _calibration(tmp_path: Path, target: str = "qwen3-8b") -> Path:
    shape = target_shape(target)
    flops = [shape.flops(n, 1, 64) for n in (1, 4, 16)]
    points = [{"tokens": n, "batch": 1, "verify_s": 1e-3 * (1 + n / 4), "bookkeeping_s": 1e-4 * n}
              for n in (1, 4, 16)]
    profile = fit_profile(points, flops, shape.overhead_units(), 5e9, "cpu")
    path = tmp_path / "cal.json"
    write_calibration(path, {"target": target, "identity": shape.identity(), "device": "cpu", "dtype": "torch.float32",
                             "context": 64, "points": points, "profile": profile.to_dict()})
    return path


def test_calibration_interpolates_and_names_missing_points(tmp_path: Path):
    cal: Calibration = load_calibration(_calibration(tmp_path))
    assert cal.verify_s(10, 1) == pytest.approx(1e-3 * (1 + 10 / 4))  # linear between 4 and 16
    with pytest.raises(JfbenchError, match="batch size 8"):
        cal.verify_s(4, 8)
    with pytest.raises(JfbenchError, match="not 64"):
        cal.verify_s(64, 1)


def test_calibration_for_another_target_is_refused(tmp_path: Path):
    path = _calibration(tmp_path, "llama3-8b")
    with pytest.raises(JfbenchError, match="measured on target 'llama3-8b'"):
        build_cost_model(None, "qwen3-8b", None, path, None)
    with pytest.raises(JfbenchError, match="not 'h100-sxm'"):
        build_cost_model("h100-sxm", "llama3-8b", None, path, None)


def test_a_gpu_calibration_names_its_device_not_cpu_here(tmp_path: Path):
    # Bug caught: every calibrated projection was labelled cpu-here, an H200's tables included.
    path = _calibration(tmp_path)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "device": "cuda:0 (NVIDIA H200)"}))
    model, name = build_cost_model(None, "qwen3-8b", None, path, None)
    assert name == model.hardware.name == "calibrated cuda:0 (NVIDIA H200)"  # the table's column and its header


def test_calibrated_model_uses_the_measured_table(tmp_path: Path):
    model, name = build_cost_model(None, "qwen3-8b", None, _calibration(tmp_path), None)
    assert name == "cpu-here" and model.dtype_bytes == DTYPE_BYTES["float32"]
    assert model.verify_s(16, 1) == pytest.approx(5e-3)
    assert model.ar_s(1) == pytest.approx(1e-3 * 1.25 + 1e-4)  # verify of the root + its bookkeeping


def _run(tmp_path: Path, drafters: dict[str, dict], budgets=(16, 64, 256)) -> Path:
    rows = [{"suite": "gsm8k", "drafter": "ar", "variant": "default", "budget": 1, "batch_size": 1, "repeat": 0,
             "tau": 1.0, "speedup_decode_micro": 1.0, "pairing": "interleaved"}]
    for name, cols in drafters.items():
        rows += [{"suite": "gsm8k", "drafter": name, "variant": "default", "budget": b, "batch_size": 1, "repeat": 0,
                  "tau": 2.0 + b / 64, "speedup_decode_micro": 1.5, "pairing": "interleaved", **cols} for b in budgets]
    folder = tmp_path / "run"
    folder.mkdir()
    pd.DataFrame(rows).to_csv(folder / "summary.csv", index=False)
    (folder / "manifest.json").write_text(json.dumps({"config": {"target": "qwen3-8b", "drafters": []}}))
    return folder


def test_project_run_recorded_counters_best_budget_and_columns(tmp_path: Path):
    run = load_run(_run(tmp_path, {"ngram": {"draft_passes": 0.0, "draft_entries": 0.0}}))
    table, notes = project_run(run, h100_qwen8b(), [1, 32])
    assert not notes and set(table["counters"]) == {"recorded"}
    assert len(table) == 3 * 2  # budgets × batch sizes
    assert (table["draft_s"] == 0).all()  # no head forwards for a host-side drafter
    assert table.groupby("batch_size")["best"].sum().tolist() == [1, 1]
    assert table.loc[table["batch_size"] == 1, "measured_speedup"].notna().all()
    assert table.loc[table["batch_size"] == 32, "measured_speedup"].isna().all()  # not measured there
    assert (table["eta"] == table["speedup"] / table["tau"]).all()


def test_each_temperature_is_projected_on_its_own(tmp_path: Path):
    # Bug: cells of a `--temperatures 0,1` run averaged into one τ per budget (a τ nobody measured).
    folder = _run(tmp_path, {"ngram": {"draft_passes": 0.0, "draft_entries": 0.0}})
    summary = pd.read_csv(folder / "summary.csv")
    sampled = summary.assign(temperature=1.0, tau=lambda d: (d["tau"] - 1) / 2 + 1)
    pd.concat([summary.assign(temperature=0.0), sampled]).to_csv(folder / "summary.csv", index=False)
    table, _ = project_run(load_run(folder), h100_qwen8b(), [1])
    assert len(table) == 3 * 2  # budgets × temperatures
    greedy, hot = (table[table["temperature"] == t].set_index("budget")["tau"] for t in (0.0, 1.0))
    assert greedy.tolist() == [2.25, 3.0, 6.0] and hot.tolist() == [1.625, 2.0, 3.5]
    assert table.groupby("temperature")["best"].sum().tolist() == [1, 1]


def test_run_without_counters_plugin_drafter_is_an_error_naming_the_run(tmp_path: Path):
    folder = _run(tmp_path, {"my-plugin": {}})
    with pytest.raises(JfbenchError, match=r"run '.*run' has no draft counters for drafter 'my-plugin'"):
        project_run(load_run(folder), h100_qwen8b(), [1])


def test_run_without_counters_builtin_uses_nominal_unless_required(tmp_path: Path):
    run = load_run(_run(tmp_path, {"ngram": {}}))
    table, notes = project_run(run, h100_qwen8b(), [1])
    assert set(table["counters"]) == {"nominal"} and len(notes) == 1 and "run" in notes[0]
    with pytest.raises(JfbenchError, match="has no draft counters"):
        project_run(run, h100_qwen8b(), [1], require_counters=True)


def test_learned_drafter_without_head_config_asks_for_head_layers(tmp_path: Path):
    run = load_run(_run(tmp_path, {"jetflow": {"draft_passes": 2.0, "draft_entries": 80.0}}))
    with pytest.raises(JfbenchError, match="--head-layers"):
        project_run(run, h100_qwen8b(), [1])
    table, _ = project_run(run, h100_qwen8b(), [1], head_layers=5, head_taps=5)
    assert (table["draft_s"] > 0).all() and (table["head_layers"] == 5).all()


def test_toy_quality_bar_projects_every_drafter_and_budget():
    # The issue's "done when" run: recorded before the counters, heads' records in ../heads.
    run = load_run(REPO / "results" / "baselines" / "toy-quality-bar" / "main")
    table, notes = project_run(run, h100_qwen8b(), [1, 8, 32])
    assert len(table) == 3 * 3 * 3 and table["speedup"].notna().all() and notes
    assert set(table["head_layers"]) >= {1, 2}  # eagle 1 layer, block heads 2 (their config.json)


def test_cli_bad_hardware_is_one_line_exit_2(cli):
    code, out, err = cli("project", str(REPO / "results/baselines/toy-quality-bar/main"), "--hardware", "h900",
                         "--target-config", "qwen3-8b")
    assert code == 2 and err.count("\n") == 1 and "'h900'" in err


def test_report_gains_the_projected_figure_only_after_project(tmp_path: Path):
    # Bug caught: the figure silently missing from `jfbench report` (or drawn without a projection).
    import shutil

    from jetflow_bench.projection.project import write_projection
    from jetflow_bench.report.plots import make_figures

    folder = tmp_path / "toy-quality-bar"
    shutil.copytree(REPO / "results" / "baselines" / "toy-quality-bar", folder)
    run = load_run(folder / "main")
    assert "projected_speedup" not in [f.name for f in make_figures(run)]
    table, _ = project_run(run, h100_qwen8b(), [1, 32], hardware="h100-sxm")
    write_projection(table, run.path)
    figure = next(f for f in make_figures(run) if f.name == "projected_speedup")
    assert figure.title == "Projected on h100-sxm" and "not a measurement" in figure.caption
    assert len(figure.figure.axes) == 2  # one suite × two projected batch sizes


@pytest.mark.slow
def test_verify_cost_writes_a_calibration_that_project_accepts_for_its_target(tmp_path: Path, cli):
    # Bugs caught: the file's target identity not matching what `project --target-config FOLDER`
    # resolves for the same model (every calibrated projection would then be refused); a second batch
    # size's prefill while the first batch is still live (it raised, so only --batch-sizes 1 worked).
    from tests.helpers.random_models import save_random_model

    model = save_random_model(tmp_path / "tiny")
    out = tmp_path / "cal.json"
    code, _, err = cli("bench", "verify-cost", "--target", str(model), "--sizes", "4", "--batch-sizes", "1,2",
                       "--context", "16", "--repeats", "3", "--device", "cpu", "--out", str(out))
    assert code == 0, err
    cal = load_calibration(out)
    assert [(p["batch"], p["tokens"]) for p in cal.points] == [(1, 1), (1, 4), (2, 1), (2, 4)]
    assert all(p["verify_s"] > 0 for p in cal.points)
    built, name = build_cost_model(None, str(model), None, out, None)
    assert name == "cpu-here" and built.ar_s(1) > 0


def test_draft_passes_are_sequential_forwards():
    # Bug caught: P passes priced as one forward over all E entries (EAGLE's depth would cost nothing).
    model = h100_qwen8b()
    head = head_shape(model.target, 1, 3)
    one = model.forward(head, 7, 1).seconds
    assert model.draft_s(head, passes=8, entries=56, batch=1) == pytest.approx(8 * one)
    assert model.draft_s(None, passes=0, entries=0, batch=1) == 0


def test_verify_is_priced_at_the_tree_size_actually_verified(tmp_path: Path):
    # Bug caught: an n-gram drafter that fills 10 of 64 nodes charged for a 64-node verify.
    cal_model, _ = build_cost_model(None, "qwen3-8b", None, _calibration(tmp_path), None)
    folder = _run(tmp_path, {"ngram": {"draft_passes": 0.0, "draft_entries": 0.0, "drafted": 90.0, "n_steps": 10}},
                  budgets=(16,))
    table, _ = project_run(load_run(folder), cal_model, [1])
    assert table["tree_nodes"].iloc[0] == 10
    assert table["verify_s"].iloc[0] == pytest.approx(cal_model.verify_s(10, 1))


def test_host_side_drafter_keeps_its_measured_seconds_per_step(tmp_path: Path):
    # Bug caught: an n-gram lookup (no head forwards) projected as free, inflating its speed-up.
    folder = _run(tmp_path, {"ngram": {"draft_passes": 0.0, "draft_entries": 0.0, "draft_s": 0.05, "n_steps": 100}},
                  budgets=(16,))
    table, _ = project_run(load_run(folder), h100_qwen8b(), [1, 8])
    assert table["draft_s"].tolist() == pytest.approx([5e-4, 8 * 5e-4])  # 0.05 s / 100 steps, per sequence
    assert set(table["draft_priced"]) == {"host (measured)"}


def test_demo_table_labels_the_projection_beside_the_measured_speedup(tmp_path: Path):
    # Bug caught: a newcomer reading the demo's projected H100 number as a measurement.
    from rich.console import Console

    from jetflow_bench.projection.display import measured_vs_projected

    run = load_run(_run(tmp_path, {"ngram": {"draft_passes": 0.0, "draft_entries": 0.0}}))
    table, _ = project_run(run, h100_qwen8b(), [1], hardware="h100-sxm")
    console = Console(width=200, record=True)
    console.print(measured_vs_projected(table, "h100-sxm", batch=1))
    text = console.export_text()
    assert "measured speed-up (this CPU)" in text and "projected on h100-sxm" in text
    assert "projection, not a measurement" in text and "1.50x" in text  # the run's own measured value


def test_nominal_counters_follow_each_drafters_own_defaults():
    """Bug: projection restating defaults that drifted from the drafters' (an EAGLE depth of 8 where
    the head's own depth is the default; one JetFlow refinement where jetflow runs none)."""
    from jetflow_bench.projection.nominal import nominal_counters

    block, budget = 16, 64
    assert nominal_counters("jetflow", budget, block, {}) == (1.0, 16.0)  # no refinement by default
    assert nominal_counters("jetflow-refine", budget, block, {}) == (2.0, 16.0 + 2 * budget)
    assert nominal_counters("jetflow", budget, block, {"refine_passes": 2}) == (3.0, 16.0 + 4 * budget)
    assert nominal_counters("eagle", budget, block, {}) == (15.0, 1.0 + 14 * 8)  # the head's depth, top_k 8
    assert nominal_counters("eagle3", budget, block, {}) == (8.0, 1.0 + 7 * 10)  # EAGLE-3's depth 8, top_k 10
    assert nominal_counters("dflash", budget, None, {}) is None  # the block size is unknown
    assert nominal_counters("ngram", budget, None, {}) == (0.0, 0.0)
    assert nominal_counters("oracle", budget, block, {}) is None  # declares none


def test_a_flat_calibration_shows_no_compute_bound_not_a_308_digit_rate():
    # Bug caught: a GPU calibration fitted before the slope floor stored 1/tiny FLOP/s, printed in full.
    from jetflow_bench.projection.display import _flops

    assert _flops(4.5e307) == "unbounded (no slope in the calibration)"
    assert _flops(9.9e14) == "990.0 TFLOP/s" and _flops(6e10) == "60.0 GFLOP/s"
