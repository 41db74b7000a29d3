"""One arm's τ across two sets of τ runs, paired per seed and prompt (`jetflow_bench.report.compare`)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.report.compare import compare_tau


def _run(folder: Path, taus: dict[int, list[float]], prompts_hash: str = "abc", arm: str = "jetflow") -> Path:
    """A run folder whose ``arm`` emitted taus[budget][request] x 10 tokens in 10 steps per request."""
    folder.mkdir(parents=True)
    rows = [{"suite": "gsm8k", "drafter": arm, "variant": "default", "budget": budget, "request": request, "steps": 10,
             "emitted": round(10 * t)} for budget, per_request in taus.items() for request, t in enumerate(per_request)]
    pd.DataFrame(rows).to_parquet(folder / "requests.parquet")
    manifest = {"config": {"target": "deep", "max_new_tokens": 256, "temperatures": [0.0]},
                "suites": {"gsm8k": {"prompts_hash": prompts_hash}}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_compare_pairs_the_arm_per_seed_and_prompt(tmp_path):
    base = [_run(tmp_path / f"new-s{s}", {16: [2.0, 3.0, 2.0, 3.0], 64: [3.0] * 4}) for s in (0, 1)]
    other = [_run(tmp_path / f"old-s{s}", {16: [2.2, 3.3, 2.2, 3.3], 64: [3.0, 3.3, 2.7, 3.0]}) for s in (0, 1)]
    table = compare_tau(base, other, "jetflow").set_index("budget")
    assert table.loc[16, "effect"] == pytest.approx(0.1) and table.loc[16, "lo"] == pytest.approx(0.1)  # +10% on every prompt
    assert (table.loc[16, "tau_base"], table.loc[16, "tau_other"]) == (pytest.approx(2.5), pytest.approx(2.75))
    assert table.loc[64, "effect"] == pytest.approx(0.0) and table.loc[64, "lo"] < 0 < table.loc[64, "hi"]
    assert (table["seeds"] == 2).all() and (table["prompts"] == 4).all()
    [row] = compare_tau(base[:1], other, "jetflow").query("budget == 16").to_dict("records")  # seed 1 has no base
    assert row["seeds"] == 1


def test_compare_refuses_runs_of_other_prompts_or_without_the_arm(tmp_path):
    base = _run(tmp_path / "new-s0", {16: [2.0]})
    with pytest.raises(JfbenchError, match="different gsm8k requests"):
        compare_tau([base], [_run(tmp_path / "old-s0", {16: [2.0]}, prompts_hash="xyz")], "jetflow")
    with pytest.raises(JfbenchError, match="no jetflow arm"):
        compare_tau([base], [_run(tmp_path / "df-s0", {16: [2.0]}, arm="dflash")], "jetflow")
    with pytest.raises(JfbenchError, match="no manifest.json"):
        compare_tau([base], [tmp_path], "jetflow")


def test_compare_command_prints_one_row_per_budget(cli, tmp_path):
    base = _run(tmp_path / "new-s0", {16: [2.0, 3.0], 64: [3.0, 3.0]})
    other = _run(tmp_path / "old-s0", {16: [2.2, 3.3], 64: [3.0, 3.3]})
    code, text, err = cli("compare", str(base), "--other", str(other), "--format", "csv")
    assert code == 0, err
    assert text.splitlines()[0].startswith("suite,budget,arm,tau_base") and len(text.splitlines()) == 3
    code, text, err = cli("compare", str(base), "--other", str(tmp_path))
    assert code == 2 and text == "" and err.count("\n") == 1
