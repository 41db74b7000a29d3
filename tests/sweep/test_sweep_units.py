"""Sweep pieces without a model: grid order and hashes, losslessness, the store's lock and atomicity,
ablation variants and deltas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from jetflow_bench.core.budget_policy import Budget
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.loop import (
    BatchResult,
    MarginalBlock,
    NodeBlock,
    RankBlock,
    RequestResult,
    StepRecord,
)
from jetflow_bench.sweep.ablation import ablation_table, trained_recipe, variants, with_checkpoints
from jetflow_bench.sweep.arm_syntax import parse_drafters
from jetflow_bench.sweep.grid import (
    DrafterSpec,
    SweepConfig,
    cell_hash,
    cells,
    config_hash,
    parse_budgets,
    settings_hash,
    spec_for,
)
from jetflow_bench.sweep.journal import CellJournal
from jetflow_bench.sweep.lossless import first_divergence, judge, tie_gap
from jetflow_bench.sweep.records import DecodedBatch
from jetflow_bench.sweep.store import HOLDER, RunLock, RunStore
from jetflow_bench.sweep.tables import REQUEST_COLUMNS, STEP_COLUMNS
from jetflow_bench.training.config import train_config


def config(**changes) -> SweepConfig:
    base = dict(
        target="/t", drafters=(DrafterSpec("ngram"), DrafterSpec("oracle")), suites=("gsm8k", "math500"),
        budgets=(Budget.fixed(16), Budget.fixed(64)), batch_sizes=(1, 4), repeats=2, device="cpu", dtype="float32", threads=1,
    )
    return SweepConfig(**{**base, **changes})


# ------------------------------------------------------------------ grid
def test_grid_runs_each_baseline_before_its_arms_and_covers_the_product():
    grid = list(cells(config()))
    assert len(grid) == 2 * 2 * 2 * (1 + 2 * 2)  # repeats × suites × batch sizes × (AR + drafters × budgets)
    assert len({c.cell_id for c in grid}) == len(grid)
    seen_baselines = set()
    for cell in grid:
        if cell.is_baseline:
            assert (cell.budget, cell.variant) == (Budget.fixed(1), "default")
            seen_baselines.add(cell.pair)
        else:
            assert cell.pair in seen_baselines
    assert grid[0].cell_id == "gsm8k__ar__default__B1__bs1__r0"


def test_hashes_change_with_what_determines_the_numbers():
    cfg = config()
    cell = next(c for c in cells(cfg) if c.drafter == "ngram")
    assert config_hash(cfg) == config_hash(config())
    assert config_hash(cfg) != config_hash(config(max_new_tokens=8))
    same_cell_bigger_grid = config(budgets=(*config().budgets, Budget.fixed(256)))
    assert cell_hash(cfg, cell, spec_for(cfg, cell)) == cell_hash(same_cell_bigger_grid, cell, spec_for(cfg, cell))
    assert cell_hash(cfg, cell, spec_for(cfg, cell)) != cell_hash(config(seed=1), cell, spec_for(cfg, cell))
    assert config_hash(cfg) != config_hash(config(compile=True))  # compiled timings are other numbers


def test_settings_hash_ignores_only_the_grid():
    assert settings_hash(config()) == settings_hash(config(budgets=(Budget.fixed(256),), repeats=1, suites=("gsm8k",)))
    assert settings_hash(config()) != settings_hash(config(max_new_tokens=8))


def test_hashes_name_weights_not_paths(tmp_path):
    """A CI clone retrains the same heads under other paths, with other wall times: same hash; other weights: new hash."""
    def model(folder, weights: bytes, seconds: float):
        folder.mkdir(parents=True)
        record = {"hidden_size": 8, "target": {"name": str(folder), "vocab_size": 9}, "training": {"seconds": seconds}}
        (folder / "config.json").write_text(json.dumps(record))
        (folder / "model.safetensors").write_bytes(weights)
        return str(folder)

    def sweep(root, weights=b"w" * 8, seconds=1.0):
        head = model(root / "head", weights, seconds)
        return config(target=model(root / "target", b"t" * 8, 0.0), drafters=(DrafterSpec("eagle", checkpoint=head),))

    here, there, retrained = sweep(tmp_path / "a"), sweep(tmp_path / "b", seconds=2.0), sweep(tmp_path / "c", b"v" * 8)
    assert config_hash(here) == config_hash(there) != config_hash(retrained)
    cell = next(c for c in cells(here) if c.drafter == "eagle")
    assert cell_hash(here, cell, here.drafters[0]) == cell_hash(there, cell, there.drafters[0])
    assert cell_hash(here, cell, here.drafters[0]) != cell_hash(retrained, cell, retrained.drafters[0])
    head = Path(here.drafters[0].checkpoint) / "model.safetensors"
    head.write_bytes(b"u" * 16)  # retrained in place: the per-folder memo must not serve the old digest
    assert config_hash(here) not in {config_hash(there), config_hash(retrained)}


@pytest.mark.parametrize("text", ["0", "2000", "16,0", "x"])
def test_bad_budgets_are_user_errors(text):
    with pytest.raises(JfbenchError, match="budget"):
        parse_budgets(text)


def test_drafter_list_parsing(tmp_path):
    assert parse_drafters(f"ngram, eagle={tmp_path}") == [("ngram", {}, None), ("eagle", {}, tmp_path.resolve())]
    # commas inside brackets separate options, not arms; values are typed
    assert parse_drafters(f"eagle[depth=15, top_k=4]={tmp_path},jetflow[construction=best-first]") == [
        ("eagle", {"depth": 15, "top_k": 4}, tmp_path.resolve()), ("jetflow", {"construction": "best-first"}, None),
    ]
    with pytest.raises(JfbenchError, match="always run"):
        parse_drafters("ar,ngram")
    with pytest.raises(JfbenchError, match="does not exist"):
        parse_drafters(f"eagle={tmp_path / 'missing'}")
    for bad in ("eagle[depth=15", "eagle[depth]", "eagle[[depth=1]]"):
        with pytest.raises(JfbenchError, match="brackets|KEY=VALUE|write"):
            parse_drafters(bad)


def test_arm_names_carry_only_non_default_options():
    from jetflow_bench.sweep.arms import arm_spec

    assert arm_spec("ngram", {"max_ngram": 2}, None).label == "ngram[max_ngram=2]"
    assert arm_spec("pld", {"max_ngram": 4, "min_ngram": 1}, None).label == "ngram"  # defaults drop out
    assert arm_spec("eagle", {"top_k": 4, "depth": 15}, None).label == "eagle[depth=15,top_k=4]"
    assert arm_spec("jetflow", {"refine_passes": 0}, None).label == "jetflow"  # the released default
    assert arm_spec("jetflow-refine", {"refine_passes": 0}, None).label == "jetflow-refine[refine_passes=0]"
    base = arm_spec("eagle", {"depth": 8}, None, variant="default")
    assert base.label == "eagle" and base.full_label == "eagle[depth=8]" and base.options == (("depth", 8),)
    with pytest.raises(JfbenchError, match="has no option 'dpth': did you mean 'depth'"):
        arm_spec("eagle", {"dpth": 8}, None)


# ------------------------------------------------------------------ losslessness
def test_first_divergence():
    assert first_divergence([5, 6, 7], [5, 6, 7]) is None
    assert first_divergence([5, 6, 7], [5, 6, 9, 1]) == 2
    assert first_divergence([5, 6], [5, 6, 7]) == 2


def test_tie_gap_and_judge_excuse_only_near_ties():
    logits = torch.tensor([1.0, 3.0, 3.0 - 5e-5, 2.0])
    assert tie_gap(logits, (1, 2)) == pytest.approx(5e-5, rel=1e-2)  # fp32 spacing near 3.0 is 2.4e-7
    calls = []

    def next_token_logits(context):
        calls.append(context)
        return logits

    assert judge([9], [1, 1], [1, 1], next_token_logits, 1e-4).lossless and not calls  # equal: no forward
    tie = judge([9], [1, 1, 1], [1, 2, 0], next_token_logits, 1e-4)
    assert (tie.lossless, tie.excused, tie.first_divergence) == (False, True, 1)
    assert calls == [[9, 1]]  # prompt + common prefix
    real = judge([9], [1, 3], [1, 1], next_token_logits, 1e-4)  # token 3 is 1.0 below the top: not a tie
    assert (real.lossless, real.excused) == (False, False)
    strict = judge([9], [1, 1], [1, 2], next_token_logits, 1e-5)  # the gap 5e-5 is over this eps
    assert not strict.excused
    shorter = judge([9], [1, 1], [1], next_token_logits, 1e-4)  # no token pair to compare
    assert (shorter.excused, shorter.first_divergence) == (False, 1)


@pytest.mark.parametrize(("dtype", "given", "expected"), [
    (None, None, 1e-4),  # fp32 on a CPU: the long-standing default, so fp32 config hashes do not move
    ("bfloat16", None, 0.125),  # one bf16 ulp at logits of 16-32: rounding is not flagged as a bug
    ("float16", None, 2.0**-6),
    ("bfloat16", 0.0, 0.0),  # an explicit --tie-eps always wins, zero included
])
def test_tie_eps_default_follows_the_dtype(dtype, given, expected):
    from jetflow_bench.cli.grid_options import GridFlags, grid_config

    config = grid_config("micro", [], GridFlags(dtype=dtype, tie_eps=given))
    assert config.tie_eps == expected


def test_every_accepted_dtype_has_a_tie_eps_default():
    # Bug caught: a dtype added to --dtype without a tolerance would fail in grid_config, after parsing.
    from jetflow_bench.core.runtime import DTYPES
    from jetflow_bench.sweep.grid import DEFAULT_TIE_EPS

    assert set(DEFAULT_TIE_EPS) == set(DTYPES)


# ------------------------------------------------------------------ store
def test_second_writer_is_refused_while_the_first_holds_the_lock(tmp_path):
    first = RunLock(tmp_path)
    first.acquire()
    try:
        with pytest.raises(JfbenchError, match=f"in use by another sweep \\(pid {os.getpid()}"):
            RunLock(tmp_path).acquire()
    finally:
        first.release()
    second = RunLock(tmp_path)
    second.acquire()  # free again after release
    second.release()
    assert not (tmp_path / HOLDER).exists()  # a released lock names no holder


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path, capsys):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / HOLDER).write_text(json.dumps({"pid": dead.pid, "host": "elsewhere", "since": "then"}))
    lock = RunLock(tmp_path)
    lock.acquire()
    assert json.loads((tmp_path / HOLDER).read_text())["pid"] == os.getpid()
    assert f"stale lock of pid {dead.pid}" in capsys.readouterr().err
    lock.release()


def test_store_refuses_other_configs_and_foreign_folders(tmp_path):
    store = RunStore(tmp_path / "run")
    store.folder.mkdir()
    assert store.prepare("aaa", force=False) is None
    store.write_manifest({"config_hash": "aaa"})
    assert store.prepare("aaa", force=False) == {"config_hash": "aaa"}
    with pytest.raises(JfbenchError, match="another config"):
        store.prepare("bbb", force=False)
    (store.folder / "summary.csv").write_text("x")
    assert store.prepare("bbb", force=True) is None
    assert not (store.folder / "summary.csv").exists()
    store.write_manifest({"config_hash": "aaa", "settings_hash": "s"})
    assert store.prepare("bbb", force=False, settings_hash="s")["config_hash"] == "aaa"  # only the grid changed
    with pytest.raises(JfbenchError, match="another config"):
        store.prepare("bbb", force=False, settings_hash="t")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(JfbenchError, match="holds no jfbench run"):
        RunStore(tmp_path / "other").prepare("aaa", force=True)


def _write_sound_cell(store: RunStore, cell_id: str, config_hash: str, rows: int = 2) -> None:
    steps = pd.DataFrame({c: [0] * rows for c in STEP_COLUMNS})
    requests = pd.DataFrame({c: [0] * rows for c in REQUEST_COLUMNS})
    store.write_cell(cell_id, steps, requests, {"config_hash": config_hash, "n_steps": rows, "n_requests": rows})


def test_a_cell_counts_only_once_its_marker_is_written(tmp_path):
    store = RunStore(tmp_path)
    _write_sound_cell(store, "c1", "h1")
    (store.cells_dir / "c2.steps.parquet").write_bytes(b"partial")  # a crash before the marker
    assert RunStore(tmp_path).finished({"c1": "h1", "c2": "h2"}) == {"c1"}
    assert RunStore(tmp_path).finished({"c1": "other"}) == set()  # written under another config
    assert not list(store.cells_dir.glob(".*tmp*"))


def test_damaged_finished_cells_are_redone_each_with_one_line(tmp_path, capsys):
    store = RunStore(tmp_path)
    for cell in ("sound", "truncated", "short", "no-column", "bad-record", "gone"):
        _write_sound_cell(store, cell, "h")
    cells = store.cells_dir
    truncated = cells / "truncated.steps.parquet"
    truncated.write_bytes(truncated.read_bytes()[:100])
    pd.DataFrame({c: [0] for c in REQUEST_COLUMNS}).to_parquet(cells / "short.requests.parquet")  # 1 row, record: 2
    pd.DataFrame({c: [0, 0] for c in STEP_COLUMNS if c != "accepted"}).to_parquet(cells / "no-column.steps.parquet")
    (cells / "bad-record.json").write_text('{"config_hash": "h", "n_st')  # half-copied
    (cells / "gone.requests.parquet").unlink()
    ids = ["sound", "truncated", "short", "no-column", "bad-record", "gone"]
    assert RunStore(tmp_path).finished(dict.fromkeys(ids, "h"), {"truncated": "gsm8k ngram B=4"}) == {"sound"}
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 5 and all("will run again" in line for line in lines)
    assert "cell gsm8k ngram B=4 will run again" in lines[0] and "truncated.steps.parquet is unreadable" in lines[0]
    assert "has 1 rows where its cell record says 2" in lines[1] and "lacks the columns ['accepted']" in lines[2]
    assert "bad-record.json is not valid JSON" in lines[3] and "gone.requests.parquet is missing" in lines[4]
    assert sorted(p.name for p in cells.iterdir()) == ["sound.json", "sound.requests.parquet", "sound.steps.parquet"]
    store.write_manifest({"config_hash": "h"})
    store.manifest_path.write_text('{"config_ha')  # a half-copied manifest: resumable, said once
    assert store.prepare("h", force=False) is None and "not valid JSON" in capsys.readouterr().err
    assert RunStore(tmp_path).finished({"sound": "h"}) == {"sound"}


def _decoded(index: int, requests: list[int]) -> DecodedBatch:
    steps = [StepRecord(r, 0, 0, len(requests), 16, 3, 2, 2, 3, 2, 1, 4, 1e6, 2e6, float("nan"), 0.5, 0.1, "step")
             for r in range(len(requests))]
    result = BatchResult([RequestResult(r, [1, 2], [5, 6, 7], "length", 0.1, 0.2, 1) for r in range(len(requests))],
                         steps, 0.3, [NodeBlock(0, 0, [0.0, -0.5], [-1, 0], [0, 1])],
                         marginals=[MarginalBlock(0, 0, [[5, 6]], [[-0.25, -1.5]], [0.0])], ranks=[RankBlock(0, 0, [0, -1])])
    return DecodedBatch(index, requests, result, 0.25, 1000, 1.0, "s1")


def test_a_cell_journal_gives_back_only_batches_of_this_config_and_these_prompts(tmp_path, capsys):
    """The bugs: a batch decoded under another config, for other prompts, or cut short by a crash
    reused as if it were this cell's."""
    ids = [[0, 1], [2, 3], [4]]
    journal = CellJournal(tmp_path, "cell", "h", "gsm8k ngram B=16", "s1")
    for index in range(3):
        journal.save(_decoded(index, ids[index]))
    loaded = CellJournal(tmp_path, "cell", "h", "gsm8k ngram B=16", "s2").load(ids)
    assert repr(loaded) == repr({i: _decoded(i, ids[i]) for i in range(3)})  # repr: NaN (an unsplit time) != NaN
    assert capsys.readouterr().err == ""
    files = sorted(journal.folder.iterdir())
    files[1].write_text(files[1].read_text()[:200])  # cut short
    assert sorted(CellJournal(tmp_path, "cell", "h", "x", "s2").load([[0, 1], [2, 3], [9]])) == [0]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "batch-0001.json is decoded again: it is unreadable" in err[0]
    assert "batch-0002.json is decoded again: its requests are not this batch's" in err[1]
    assert CellJournal(tmp_path, "cell", "other", "x", "s2").load(ids) == {}
    assert "belongs to another config" in capsys.readouterr().err and not list(journal.folder.iterdir())
    journal.save(_decoded(0, ids[0]))
    journal.clear()
    assert not (tmp_path / "partial").exists()


# ------------------------------------------------------------------ ablation
def test_variants_name_overrides_and_route_training_options():
    base = DrafterSpec("jetflow", checkpoint="/ckpt")
    specs = variants(base, {"head": ["bidirectional"], "refine_passes": [0, 2]}, {"fanout": [3]})
    assert [s.variant for s in specs] == ["default", "head=bidirectional", "refine_passes=0", "refine_passes=2", "fanout=3"]
    head = specs[1]
    assert head.train == (("head", "bidirectional"),) and head.checkpoint is None  # other weights
    assert specs[2].options == (("refine_passes", 0),) and specs[2].checkpoint == "/ckpt"
    with pytest.raises(JfbenchError, match="nothing to ablate"):
        variants(base, {}, {})
    layout = variants(base, {"layout": ["prefix"]}, {})[1]  # a family's declared recipe field: its own weights
    assert layout.train == (("layout", "prefix"),) and layout.checkpoint is None
    assert variants(DrafterSpec("ngram"), {"layout": ["prefix"]}, {})[1].options == (("layout", "prefix"),)  # no recipe: a build option
    with pytest.raises(JfbenchError, match="own trained head"):
        with_checkpoints(specs, {}, train=None)
    recipes = []

    def train(drafter, recipe):
        recipes.append(recipe)
        return f"/cache/{drafter}-{len(recipes)}"

    trained = with_checkpoints(specs, {}, train, recipe={"steps": 40})
    assert [s.checkpoint for s in trained] == ["/ckpt", "/cache/jetflow-1", "/ckpt", "/ckpt", "/ckpt"]
    assert recipes == [{"steps": 40, "head": "bidirectional"}]  # /ckpt records no recipe: only --train-option
    assert with_checkpoints(specs, {"head=bidirectional": "/mine"}, train=None)[1].checkpoint == "/mine"
    recipes.clear()
    untrained = variants(DrafterSpec("jetflow"), {"refine_passes": [0]}, {})
    assert [s.checkpoint for s in with_checkpoints(untrained, {}, train)] == ["/cache/jetflow-1"] * 2
    assert recipes == [{}]  # the default head is trained once and shared by inference variants


def test_decay_variants_train_their_own_heads():
    specs = variants(DrafterSpec("dflash", checkpoint="/ckpt"), {"decay": [0, 7]}, {})
    assert [s.train for s in specs[1:]] == [(("decay", 0),), (("decay", 7),)]
    recipes = []
    trained = with_checkpoints(specs, {}, lambda drafter, recipe: recipes.append(recipe) or f"/h{len(recipes)}")
    assert [s.checkpoint for s in trained] == ["/ckpt", "/h1", "/h2"] and recipes == [{"decay": 0}, {"decay": 7}]
    assert train_config("dflash", decay=0).to_dict()["decay"] == 0.0  # same head as `jfbench train --decay 0`
    with pytest.raises(JfbenchError, match="--decay -1"):
        train_config("dflash", decay=-1)


def test_variant_heads_inherit_the_default_heads_recipe(tmp_path):
    head = tmp_path / "head"
    head.mkdir()
    config = {"format": "jfbench-head", "drafter": "jetflow", "head_mode": "causal", "target": {},
              "training": {"config": {"drafter": "jetflow", "steps": 40, "loss": "fkl", "corpus": ["gsm8k"]}}}
    (head / "config.json").write_text(json.dumps(config))
    assert trained_recipe(head) == {"steps": 40, "loss": "fkl", "corpus": ("gsm8k",)}


def test_a_given_head_trained_with_another_setting_is_refused(tmp_path):
    # Bug: `--checkpoint loss=rkl=DIR` with an fkl head runs, and its numbers are labelled rkl's.
    head = tmp_path / "fkl"
    head.mkdir()
    config = {"format": "jfbench-head", "drafter": "jetflow", "training": {"config": {"drafter": "jetflow", "loss": "fkl"}}}
    (head / "config.json").write_text(json.dumps(config))
    specs = variants(DrafterSpec("jetflow", checkpoint=str(head)), {"loss": ["rkl"]}, {})
    with pytest.raises(JfbenchError, match="trained with loss=fkl, not rkl"):
        with_checkpoints(specs, {"loss=rkl": head}, train=None)
    config["training"]["config"]["loss"] = "rkl"
    (head / "config.json").write_text(json.dumps(config))
    assert with_checkpoints(specs, {"loss=rkl": head}, train=None)[1].checkpoint == str(head)
    released = tmp_path / "released"  # records no recipe: taken as given
    released.mkdir()
    assert with_checkpoints(specs, {"loss=rkl": released}, train=None)[1].checkpoint == str(released)


def _requests(drafter: str, variant: str, accepted: list[int], decode_s: list[float], budget: int = 16,
              base_s: list[float] | None = None) -> pd.DataFrame:
    """An arm's request rows; ``base_s``: the AR times paired with them in their rounds (default: their own)."""
    n = len(accepted)
    return pd.DataFrame({
        "suite": "gsm8k", "drafter": drafter, "variant": variant, "budget": budget, "batch_size": 1, "repeat": 0,
        "request": range(n), "accepted": accepted, "emitted": [a + 10 for a in accepted], "steps": [10] * n,
        "decode_s": decode_s, "base_decode_s": decode_s if base_s is None else base_s,
    })


def test_ablation_deltas_are_paired_over_prompts():
    ar_s = [2.0, 4, 6, 8, 10, 12]
    ar = _requests("ar", "default", [0] * 6, ar_s, budget=1)
    default = _requests("jetflow", "default", [20, 20, 20, 20, 20, 20], [1.0, 2, 3, 4, 5, 6], base_s=ar_s)
    same = _requests("jetflow", "refine_passes=1", [20] * 6, [1.0, 2, 3, 4, 5, 6], base_s=ar_s)
    worse = _requests("jetflow", "head=bidirectional", [10] * 6, [2.0, 4, 6, 8, 10, 12], base_s=ar_s)
    table = ablation_table(pd.concat([ar, default, same, worse]), n_boot=200).set_index("variant")
    assert table.loc["refine_passes=1", "tau_delta"] == 0 and table.loc["refine_passes=1", "tau_delta_hi"] == 0
    row = table.loc["head=bidirectional"]
    assert (row.tau, row.tau_default, row.tau_delta) == (2.0, 3.0, -1.0)
    assert (row.speedup_decode_micro, row.speedup_default) == (1.0, 2.0)
    # per-prompt ratios are constant, so pairing leaves no spread: the CI collapses onto the delta
    assert np.isclose(row.speedup_delta_lo, -1.0) and np.isclose(row.speedup_delta_hi, -1.0)
    assert set(table.index) == {"refine_passes=1", "head=bidirectional"}
    # a variant timed in another session, beside its own (slower) baseline, divides by that one
    later = worse.assign(base_decode_s=worse["base_decode_s"] * 1.5)
    row = ablation_table(pd.concat([ar, default, later]), n_boot=0).set_index("variant").loc["head=bidirectional"]
    assert (row.speedup_decode_micro, row.speedup_default) == (1.5, 2.0)
    unpaired = ablation_table(pd.concat([ar, default, worse]).drop(columns="base_decode_s"), n_boot=0)
    assert unpaired["speedup_decode_micro"].isna().all() and unpaired["tau"].notna().all()  # recorded before pairing
    tau_only = pd.concat([default, worse]).assign(base_decode_s=np.nan)  # --tau-only: no baseline timed at all
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "All-NaN slice" warning for a speed-up nobody measured
        row = ablation_table(tau_only, n_boot=200).set_index("variant").loc["head=bidirectional"]
    assert np.isnan([row.speedup_delta_lo, row.speedup_delta_hi]).all() and row.tau_delta_lo <= -1.0 <= row.tau_delta_hi


def test_checkpoint_pairs_accept_variant_names_with_equals():
    from jetflow_bench.cli.recipe_flags import option_pairs as _pairs

    assert _pairs(["head=bidirectional=/heads/d", "refine_passes=0=/h"], "--checkpoint") == {
        "head=bidirectional": "/heads/d", "refine_passes=0": "/h",
    }
    assert _pairs(["max_ngram=2,4"], "--option") == {"max_ngram": "2,4"}
    with pytest.raises(JfbenchError):
        _pairs(["no-equals"], "--checkpoint")


def test_one_factor_moves_an_impossible_variant_to_the_nearest_common_setting():
    from jetflow_bench.sweep.ablation import one_factor

    base = DrafterSpec("jetflow", checkpoint="/ckpt")
    specs = variants(base, {"head": ["bidirectional"], "refine_passes": [1]}, {})
    out, comparisons = one_factor(specs, {"layout": "packed", "refine_passes": 0})
    by_name = {s.variant: s for s in out}
    # the bidirectional head cannot train packed: it trains prefix, and so does the arm it is compared with
    assert dict(by_name["head=bidirectional"].train) == {"head": "bidirectional", "layout": "prefix"}
    assert dict(by_name["layout=prefix"].train) == {"layout": "prefix"} and by_name["layout=prefix"].checkpoint is None
    assert comparisons["head=bidirectional"].reference == "layout=prefix"
    assert "layout=prefix" in comparisons["head=bidirectional"].held and "causal head" in comparisons["head=bidirectional"].held
    assert comparisons["refine_passes=1"].reference == "default" and comparisons["refine_passes=1"].held == ""
    # the extension refines: the comparison also drops refinement for both arms
    refine = variants(DrafterSpec("jetflow-refine", checkpoint="/ckpt"), {"head": ["bidirectional"]}, {})
    out, comparisons = one_factor(refine, {"layout": "packed", "refine_passes": 1})
    reference = next(s for s in out if s.variant == comparisons["head=bidirectional"].reference)
    assert reference.variant == "layout=prefix,refine_passes=0" and dict(reference.options) == {"refine_passes": 0}
    assert dict(next(s for s in out if s.variant == "head=bidirectional").options) == {"refine_passes": 0}
    # a base already at a common setting needs no second arm
    out, comparisons = one_factor(specs, {"layout": "prefix", "refine_passes": 0})
    assert out == specs and comparisons["head=bidirectional"].reference == "default"
    # jetflow's default mask layout trains a bidirectional head too: claim 2 changes the mask alone
    out, comparisons = one_factor(specs, {"layout": "mask", "refine_passes": 0})
    assert out == specs and comparisons["head=bidirectional"].reference == "default"


def test_ablation_rows_compare_with_the_named_arm_and_say_what_was_held():
    from jetflow_bench.sweep.ablation import Comparison

    ar = _requests("ar", "default", [0] * 4, [2.0] * 4, budget=1)
    default = _requests("jetflow", "default", [40] * 4, [1.0] * 4)
    prefix = _requests("jetflow", "layout=prefix", [30] * 4, [1.0] * 4)
    bidirectional = _requests("jetflow", "head=bidirectional", [20] * 4, [1.0] * 4)
    comparisons = {"head=bidirectional": Comparison("head=bidirectional", "head=bidirectional", "layout=prefix", "layout=prefix (why)")}
    table = ablation_table(pd.concat([ar, default, prefix, bidirectional]), n_boot=50, comparisons=comparisons)
    assert list(table["variant"]) == ["head=bidirectional"]  # the reference arm is not a variant of its own
    row = table.iloc[0]
    assert (row.tau, row.tau_default, row.tau_delta) == (3.0, 4.0, -1.0)  # vs layout=prefix (4.0), not default (5.0)
    assert row.compared_with == "layout=prefix" and row.held_fixed == "layout=prefix (why)"


def test_seeds_pool_into_one_row_with_a_ci_over_seeds_and_prompts():
    from jetflow_bench.sweep.ablation import split_seed, with_seeds

    specs = variants(DrafterSpec("jetflow", checkpoint="/ckpt"), {"refine_passes": [1]}, {})
    seeded = with_seeds(specs, [0, 1], own_seed=0)
    assert [s.variant for s in seeded] == ["default", "refine_passes=1", "seed=1", "refine_passes=1,seed=1"]
    assert dict(seeded[3].train) == {"seed": 1} and seeded[3].checkpoint is None and dict(seeded[3].options)
    assert split_seed("refine_passes=1,seed=1") == ("refine_passes=1", 1) and split_seed("seed=1") == ("default", 1)
    # a given seed-1 head serves the seed-1 copies of inference variants too (no second training)
    filled = with_checkpoints(seeded, {"seed=1": Path("/heads/s1")}, train=None)
    assert [s.checkpoint for s in filled] == ["/ckpt", "/ckpt", "/heads/s1", "/heads/s1"]
    ar = _requests("ar", "default", [0] * 6, [2.0] * 6, budget=1)
    frames = [ar, _requests("jetflow", "default", [20] * 6, [1.0] * 6), _requests("jetflow", "seed=1", [20] * 6, [1.0] * 6),
              _requests("jetflow", "refine_passes=1", [30] * 6, [1.0] * 6),  # +1 tau with seed 0
              _requests("jetflow", "refine_passes=1,seed=1", [10] * 6, [1.0] * 6)]  # -1 tau with seed 1
    table = ablation_table(pd.concat(frames), n_boot=400)
    assert list(table["variant"]) == ["refine_passes=1"]  # seed copies pool, they are not variants
    row = table.iloc[0]
    assert (row.seeds, row.tau, row.tau_default, row.tau_delta) == (2, 3.0, 3.0, 0.0)
    assert (row.tau_delta_seed_min, row.tau_delta_seed_max) == (-1.0, 1.0)
    assert (row.tau_seed_min, row.tau_seed_max) == (2.0, 4.0)
    # every prompt is alike, so only resampling the seeds can widen the CI
    assert row.tau_delta_lo == pytest.approx(-1.0) and row.tau_delta_hi == pytest.approx(1.0)


# ------------------------------------------------------------------ memory check
@pytest.mark.parametrize("static", [False, True])  # one block, or one tensor per layer (compiled)
def test_kv_cache_size_formula_is_what_the_cache_allocates(static):
    from jetflow_bench.engine.kv_cache import KVCache

    cache = KVCache(3, 2, 4, 8, 17, torch.bfloat16, torch.device("cpu"), static=static)
    allocated = sum(t.nbytes for t in (*cache.k, *cache.v))
    assert KVCache.bytes_needed(3, 2, 4, 8, 17, torch.bfloat16) == allocated == 2 * 3 * 2 * 4 * 17 * 8 * 2


@pytest.mark.parametrize(("text", "size"), [("24GiB", 24 * 2**30), ("512MB", 512 * 10**6), ("40", 40 * 2**30),
                                            ("1.5 kib", 1536), ("100b", 100)])
def test_max_memory_sizes(text, size):
    from jetflow_bench.sweep.memory import parse_size

    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "0", "-3GiB", "lots", "3 GiB extra"])
def test_bad_max_memory_is_a_one_line_error(text):
    from jetflow_bench.sweep.memory import parse_size

    with pytest.raises(JfbenchError, match="--max-memory"):
        parse_size(text)


def test_memory_check_takes_the_largest_cache_of_the_grid_and_names_its_numbers():
    from jetflow_bench.engine.stopping import StopRule
    from jetflow_bench.sweep.memory import check_memory, largest_cache
    from jetflow_bench.sweep.records import Prompt

    class Engine:  # 1 KiB per KV slot per row, 10 KiB free
        def kv_cache_bytes(self, batch: int, capacity: int) -> int:
            return batch * capacity * 1024

        def available_memory_bytes(self) -> int:
            return 10 * 1024

    stop = StopRule(2, frozenset())
    prompts = {"s": [Prompt(i, [0] * n, stop) for i, n in enumerate([1, 5, 2])]}  # batches of 2: (1, 5), (2)
    config = SweepConfig(target="t", drafters=(), suites=("s",), budgets=(Budget.fixed(2), Budget.fixed(4)), batch_sizes=(1, 2), repeats=1,
                         device="cpu", dtype="float32", threads=1)
    assert largest_cache(Engine(), config, prompts) == (2 * (5 + 2 + 4) * 1024, "s, batch 2 x (5 prompt + 2 new + "
                                                        "4 budget = 11 slots)")
    with pytest.raises(JfbenchError, match=r"needs 0.00 GiB, but cpu has free 0.00 GiB: lower --batch-sizes"):
        check_memory(Engine(), config, prompts, None)
    check_memory(Engine(), config, prompts, max_memory=22 * 1024)  # the override: exactly enough
    with pytest.raises(JfbenchError, match="--max-memory allows"):
        check_memory(Engine(), config, prompts, max_memory=22 * 1024 - 1)
