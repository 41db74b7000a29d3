"""`jfbench check`: fails on τ / a_d regressions, divergences and missing cells; warns on speed-ups."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.runtime import cpu_numerics
from jetflow_bench.report.check import check_run, update_baseline
from jetflow_bench.report.loading import paired_only, with_cell_keys
from tests.helpers.fixtures_runs import write_fixture_run

JETFLOW_16 = {"suite": "gsm8k", "drafter": "jetflow", "variant": "default", "budget": 16, "batch_size": 1,
              "repeat": 0}


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fixture_run(tmp_path_factory.mktemp("ref") / "ci", drafters=("jetflow", "ngram"), batch_sizes=(1,))


def tampered(reference: Path, tmp_path: Path, **changes: float) -> Path:
    """A copy of the reference run with `changes` written into the JETFLOW_16 cell's summary row."""
    run = Path(shutil.copytree(reference, tmp_path / "run"))
    summary = pd.read_parquet(run / "summary.parquet")
    row = (summary[list(JETFLOW_16)] == pd.Series(JETFLOW_16)).all(axis=1)
    assert row.sum() == 1
    for column, value in changes.items():
        summary.loc[row, column] = value
    summary.to_parquet(run / "summary.parquet", index=False)
    return run


def jetflow_16(reference: Path, column: str) -> float:
    summary = pd.read_parquet(reference / "summary.parquet")
    return float(summary.loc[(summary[list(JETFLOW_16)] == pd.Series(JETFLOW_16)).all(axis=1), column].iloc[0])


def test_identical_run_passes_with_exit_0_and_markdown(reference: Path, tmp_path: Path, cli) -> None:
    markdown = tmp_path / "summary.md"
    code, out, _ = cli("check", "--baseline", str(reference), "--run", str(reference),
                           "--markdown", str(markdown))
    assert code == 0 and "passed" in out
    text = markdown.read_text()
    assert text.startswith("## ✅ jfbench regression check passed") and "| status |" in text


def test_tau_regression_beyond_tolerance_fails(reference: Path, tmp_path: Path, cli) -> None:
    tau = jetflow_16(reference, "tau")
    run = tampered(reference, tmp_path, tau=tau * 0.9)
    code, out, _ = cli("check", "--baseline", str(reference), "--run", str(run))
    assert code == 1 and "FAILED" in out and "τ" in out
    result = check_run(reference, run)
    assert [(f.level, f.metric, f.cell["budget"]) for f in result.findings] == [("fail", "tau", 16)]
    assert not check_run(reference, run, tau_tol=0.15).failed  # inside a wider tolerance


def test_per_depth_acceptance_drop_fails_in_share_points(reference: Path, tmp_path: Path) -> None:
    a_2 = jetflow_16(reference, "a_2")
    run = tampered(reference, tmp_path, a_2=a_2 - 0.06)
    assert [(f.level, f.metric) for f in check_run(reference, run).findings] == [("fail", "a_2")]
    assert not check_run(reference, tampered(reference, tmp_path / "b", a_2=a_2 - 0.04)).failed


def test_unexcused_divergence_fails_even_when_tau_is_unchanged(
    reference: Path, tmp_path: Path, cli
) -> None:
    run = tampered(reference, tmp_path, lossless_unexcused=2)
    markdown = tmp_path / "summary.md"
    code, out, _ = cli("check", "--baseline", str(reference), "--run", str(run),
                           "--markdown", str(markdown))
    assert code == 1 and "2 unexcused lossless divergences" in out
    assert "❌ FAIL" in markdown.read_text()


def test_speedup_drop_only_warns(reference: Path, tmp_path: Path, cli) -> None:
    speedup = jetflow_16(reference, "speedup_decode_micro")
    run = tampered(reference, tmp_path, speedup_decode_micro=speedup * 0.5)
    code, out, _ = cli("check", "--baseline", str(reference), "--run", str(run),
                           "--format", "json")
    assert code == 0
    report = json.loads(out)
    assert report["passed"] is True
    assert [(f["level"], f["metric"]) for f in report["findings"]] == [("warn", "speed-up")]


def test_a_baseline_recorded_before_pairing_is_gated_on_tau_and_says_why_not_on_speedup(reference: Path,
                                                                                      tmp_path: Path) -> None:
    """The committed CI reference predates in-session pairing: its speed-ups (paired across cells
    that may come from other sessions) are not compared, and the check says so, once per side."""
    old = write_fixture_run(tmp_path / "old", drafters=("jetflow", "ngram"), batch_sizes=(1,), interleaved=False)
    slower = tampered(reference, tmp_path, speedup_decode_micro=0.01)
    result = check_run(old, slower)
    (info,) = [f for f in result.findings if f.metric == "speed-up"]  # no warning on the drop
    assert not result.failed and info.level == "info" and "of the baseline have no speed-up (its baseline was not timed beside it" in info.message
    assert result.cells["speedup_decode_micro_base"].isna().all() and result.cells["tau_base"].notna().all()


def test_missing_and_new_cells_are_reported(reference: Path, tmp_path: Path) -> None:
    run = Path(shutil.copytree(reference, tmp_path / "run"))
    summary = pd.read_parquet(run / "summary.parquet")
    dropped = summary[(summary["drafter"] == "ngram") & (summary["budget"] == 256)]
    extra = summary[summary["drafter"] == "jetflow"].assign(budget=lambda f: f["budget"] * 2)
    pd.concat([summary.drop(dropped.index), extra]).to_parquet(run / "summary.parquet", index=False)
    result = check_run(reference, run)
    missing = [f for f in result.findings if f.metric == "cell" and f.level == "fail"]
    new = [f for f in result.findings if f.metric == "cell" and f.level == "info"]
    assert result.failed
    assert {(f.cell["drafter"], f.cell["budget"]) for f in missing} == {("ngram", 256)}
    assert len(missing) == len(dropped) and len(new) == len(extra)
    assert set(result.cells["status"]) == {"ok", "missing", "new"}
    assert "missing from the run" in result.markdown()


def test_config_hash_change_warns(reference: Path, tmp_path: Path) -> None:
    run = Path(shutil.copytree(reference, tmp_path / "run"))
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "config_hash": "other"}))
    result = check_run(reference, run)
    assert not result.failed and [f.metric for f in result.findings] == ["config_hash"]


def test_other_cpu_kernels_warn_and_unrecorded_ones_are_not_compared(reference: Path, tmp_path: Path) -> None:
    avx2 = {"aten_capability": "AVX2", "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
            "MKL_CBWR": "COMPATIBLE"}
    manifest = json.loads((reference / "manifest.json").read_text())
    base = Path(shutil.copytree(reference, tmp_path / "base"))
    (base / "manifest.json").write_text(json.dumps({**manifest, "cpu_numerics": avx2}))
    same = Path(shutil.copytree(base, tmp_path / "same"))
    assert check_run(base, same).findings == []
    other = Path(shutil.copytree(reference, tmp_path / "other"))
    (other / "manifest.json").write_text(json.dumps({**manifest, "cpu_numerics": {**avx2, "aten_capability": "AVX512",
                                                                                 "MKL_CBWR": None}}))
    [finding] = check_run(base, other).findings
    assert (finding.level, finding.metric) == ("warn", "cpu_numerics") and not check_run(base, other).failed
    assert "MKL_CBWR COMPATIBLE → None" in finding.message and "aten_capability AVX2 → AVX512" in finding.message
    assert check_run(reference, other).findings == []  # the reference predates the record
    vendor = Path(shutil.copytree(reference, tmp_path / "vendor"))
    (vendor / "manifest.json").write_text(json.dumps({**manifest, "cpu_numerics": {**avx2, "cpu_vendor": "x"}}))
    assert check_run(base, vendor).findings == []  # a field only one side records is not compared


def with_numerics(run: Path, vendor: str) -> Path:
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "cpu_numerics": {"cpu_vendor": vendor}}))
    return run


@pytest.mark.parametrize(("tau_factor", "a_1_drop", "failed"), [(0.9, 0.12, False), (0.8, 0.0, True)])
def test_other_cpu_vendor_gates_tau_on_the_wider_tolerance_and_a_d_only_warns(
        reference: Path, tmp_path: Path, tau_factor: float, a_1_drop: float, failed: bool) -> None:
    base = with_numerics(Path(shutil.copytree(reference, tmp_path / "base")), "AuthenticAMD")
    changes = {"tau": jetflow_16(reference, "tau") * tau_factor, "a_1": jetflow_16(reference, "a_1") - a_1_drop}
    run = tampered(base, tmp_path, **changes)
    strict = check_run(base, run)
    assert strict.failed and strict.numerics_tau_tol is None  # same vendor: the 5 % gate
    result = check_run(base, with_numerics(run, "GenuineIntel"))
    assert result.failed is failed and result.numerics_tau_tol == 0.15
    levels = {f.metric: f.level for f in result.findings}
    assert levels["tau"] == ("fail" if failed else "warn") and levels["cpu_numerics"] == "warn"
    assert levels.get("a_1", "warn") == "warn"
    assert "AuthenticAMD → GenuineIntel" in result.markdown() and "under other CPU numerics" in result.headline()
    assert check_run(base, run, numerics_tau_tol=0.01).failed  # its tolerance is an option
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "config_hash": "other weights"}))
    assert "other CPU numerics" in check_run(base, run).config_note  # not "rerun reproduce.py": it was
    (base / "reproduce.py").write_text("")  # same numerics, other weights: a stale cached target, say so
    assert "empty JFBENCH_CACHE" in check_run(base, with_numerics(run, "AuthenticAMD")).config_note


def test_update_baseline_copies_summary_and_manifest(reference: Path, tmp_path: Path, cli) -> None:
    baseline = tmp_path / "baselines" / "ci"
    code, out, err = cli("check", "--update-baseline", "--run", str(reference),
                             "--baseline", str(baseline))
    assert code == 0 and "commit it" in err
    assert sorted(p.name for p in baseline.iterdir()) == ["manifest.json", "summary.csv", "summary.parquet"]
    # The copy is the summary as readers see it: keys a run predates carry their implied values, and
    # every cell says why it has no speed-up ("" when it has one).
    pd.testing.assert_frame_equal(pd.read_parquet(baseline / "summary.parquet"),
                                  paired_only(with_cell_keys(pd.read_parquet(reference / "summary.parquet"))))
    assert not check_run(baseline, reference).failed


def test_update_baseline_refuses_a_run_with_divergences(reference: Path, tmp_path: Path) -> None:
    run = tampered(reference, tmp_path, lossless_unexcused=1)
    with pytest.raises(JfbenchError, match="unexcused lossless divergences"):
        update_baseline(run, tmp_path / "baseline")


def test_missing_baseline_or_run_is_one_line_exit_2(reference: Path, tmp_path: Path, cli) -> None:
    code, out, err = cli("check", "--baseline", str(tmp_path / "nope"), "--run",
                             str(reference))
    assert code == 2 and out == "" and err.count("\n") == 1 and "--update-baseline" in err
    code, _, err = cli("check", "--baseline", str(reference), "--run", str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and "is not a run folder" in err


def test_absent_depth_columns_count_as_zero_acceptance(reference: Path, tmp_path: Path) -> None:
    run = Path(shutil.copytree(reference, tmp_path / "run"))
    summary = pd.read_parquet(run / "summary.parquet")
    summary.drop(columns=[c for c in summary if c[:2] in ("a_", "p_") and int(c[2:]) >= 3]).to_parquet(
        run / "summary.parquet", index=False)
    failed = {(f.metric, f.cell["drafter"]) for f in check_run(reference, run).findings if f.level == "fail"}
    assert ("a_3", "jetflow") in failed and all(metric == "a_3" for metric, _ in failed)


def test_the_gate_refuses_a_cached_target_or_head_trained_under_other_cpu_numerics() -> None:
    # Bug caught: reproduce.py reusing a micro target the tests trained in-process under unpinned
    # kernels (same cache name, other weights), after which `check` failed on tau with no regression.
    spec = importlib.util.spec_from_file_location("ci_reproduce", Path(__file__).resolve().parents[2] / "results/baselines/ci/reproduce.py")
    reproduce = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reproduce)
    here = cpu_numerics()
    other = {**here, "aten_capability": "AVX512" if here["aten_capability"] != "AVX512" else "AVX2"}
    message = reproduce.trained_elsewhere({Path("cache/micro"): {"cpu_numerics": here}, Path("cache/eagle"): {"cpu_numerics": other}})
    assert message.startswith("error: the cached cache/eagle") and "aten_capability" in message and "JFBENCH_CACHE" in message
    assert "\n" not in message
    assert reproduce.trained_elsewhere({Path("cache/micro"): {"cpu_numerics": here}, Path("old"): {}, Path("none"): None}) is None
