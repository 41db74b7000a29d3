"""`jfbench sweep / ablate / show` end to end on a small random target: resume after crashes,
refusals, losslessness, summary derivation and output formats."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from jetflow_bench.measure.metrics import acceptance_stats
from jetflow_bench.sweep import driver
from jetflow_bench.sweep.grid import CELL_KEYS
from jetflow_bench.sweep.hf_engine import HFEngine
from jetflow_bench.sweep.lossless import Verdict
from jetflow_bench.sweep.store import RunLock
from tests.helpers.cli import jfbench
from tests.helpers.data_dirs import benchmark_data_dir
from tests.helpers.random_models import save_random_model

DATA = benchmark_data_dir()


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    return save_random_model(tmp_path_factory.mktemp("target") / "rand")


def sweep_args(target: Path, out: Path, *extra: str) -> list[str]:
    return ["sweep", "--target", str(target), "--out", str(out), "--drafters", "ngram", "--suites", "gsm8k",
            "--budgets", "4,16", "--batch-sizes", "1,2", "--repeats", "1", "--limit", "3", "--max-new-tokens", "12",
            "--data-dir", str(DATA), "--threads", "1", "--no-progress", *extra]


@pytest.fixture(scope="module")
def base_run(target, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "base"
    code, _, err = jfbench(*sweep_args(target, out))
    assert code == 0, err
    return out


def _tables(run: Path) -> dict[str, pd.DataFrame]:
    return {n: pd.read_parquet(run / f"{n}.parquet") for n in ("steps", "requests", "cells", "summary")}


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--drafters", "ngramm"], "unknown drafter 'ngramm': did you mean 'ngram'?"),
        (["--drafters", "oracle"], "drafter 'oracle' cannot run from the command line: it is a test double"),
        (["--budgets", "0"], "budget 0 is out of range"),
        (["--budgets", "16,2000"], "budget 2000 is out of range"),
        (["--suites", "gsm9k"], "unknown suite 'gsm9k'"),
        (["--top-p", "0"], "--top-p 0.0: use 0 < top-p <= 1"),
        (["--temperature", "-1"], "--temperature -1.0: use a finite temperature >= 0"),
        (["--top-k", "-1"], "--top-k -1: input should be greater than or equal to 0"),
        (["--temperatures", "0,hot"], "--temperatures '0,hot': 'hot' is not a number"),
        (["--temperature", "1", "--temperatures", "0,1"], "give one of them"),
        (["--batch-sizes", "0"], "--batch-sizes 0 is too small"),
        (["--drafters", "ngram[maxngram=2]"], "has no option 'maxngram': did you mean 'max_ngram'?"),
        (["--drafters", "ngram[max_ngram=2],ngram[max_ngram=2]"], "names the arm 'ngram[max_ngram=2]' twice"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, flags, message):
    code, out, err = jfbench("sweep", "--target", tmp_path, "--out", tmp_path / "run", *flags)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_grid_tables_are_complete_and_lossless(base_run):
    t = _tables(base_run)
    assert len(t["summary"]) == len(t["cells"]) == 2 * (1 + 2)  # batch sizes × (AR + 2 budgets)
    assert not t["requests"].duplicated([*CELL_KEYS, "request"]).any()
    assert not t["steps"].duplicated([*CELL_KEYS, "request", "step"]).any()
    assert t["requests"]["lossless"].all() and t["summary"]["lossless_unexcused"].eq(0).all()
    assert t["requests"]["first_divergence"].isna().all()
    ar = t["summary"][t["summary"]["drafter"] == "ar"]
    assert (ar["speedup_decode_micro"] == 1).all() and ar["budget"].eq(1).all()
    manifest = json.loads((base_run / "manifest.json").read_text())
    assert manifest["config"]["budgets"] == [4, 16] and manifest["torch_threads"] == 1
    assert manifest["cpu_numerics"]["aten_capability"] == torch.backends.cpu.get_cpu_capability()
    assert "cpu_vendor" in manifest["cpu_numerics"]  # without it, check could not tell Intel from AMD
    assert manifest["versions"]["torch"] and manifest["device"] and manifest["seeds"] == {"seed": 0, "sample_seed": None}
    assert len(manifest["config_hash"]) == 12 and manifest["finished"] and manifest["git_commit"] is not None
    efficiency = manifest["engine_efficiency"]  # this engine's plain step against its roofline
    assert efficiency["plain_step_ms"] > 0 and efficiency["ratio"] > 0 and efficiency["compile"] is None
    assert set(t["summary"]["config_hash"]) == set(t["requests"]["config_hash"])


def test_summary_rows_derive_from_step_rows(base_run):
    t = _tables(base_run)
    depth = sum(c.startswith("a_") for c in t["summary"])  # the summary's per-depth columns, however deep drafts got
    derived = acceptance_stats(t["steps"], CELL_KEYS, max_depth=depth).set_index(CELL_KEYS)
    summary = t["summary"].set_index(CELL_KEYS)
    per_depth = [c for c in t["summary"] if c.startswith(("a_", "p_"))]  # as deep as drafts got accepted
    assert "a_1" in per_depth
    for column in ("n_steps", "drafted", "accepted", "tau", "alpha", "rank1_faithful", "draft_depth", *per_depth):
        pd.testing.assert_series_equal(summary[column], derived.loc[summary.index, column], check_dtype=False)
    drafting = t["summary"][t["summary"]["drafter"] != "ar"]
    assert drafting["draft_depth"].between(1, drafting["budget"] - 1).all()  # a tree's depth fits its budget
    by_request = t["steps"].groupby([*CELL_KEYS, "request"])["accepted"].agg(["sum", "size"])
    requests = t["requests"].set_index([*CELL_KEYS, "request"])
    assert (requests.loc[by_request.index, "accepted"] == by_request["sum"]).all()
    assert (requests.loc[by_request.index, "steps"] == by_request["size"]).all()


def test_show_formats(base_run):
    code, out, _ = jfbench("show", base_run)
    assert code == 0 and "ngram" in out and "τ" in out and "decode ×" in out
    assert "engine efficiency: plain step" in out  # a random 2-layer model on a CPU is far from its roofline:
    assert "overhead-bound engine: speed-ups overstate what a compiled server would see (rerun with --compile)" in out
    code, out, _ = jfbench("show", base_run, "--format", "markdown")
    assert code == 0 and out.splitlines()[2].startswith("| suite | arm |") and "| gsm8k | ngram | 16 |" in out
    code, out, _ = jfbench("show", base_run, "--format", "markdown", "--wide")
    header, _, *rows = out.splitlines()[2:]
    assert code == 0 and {"a_1", "p_2", "p_4", "rank1<=5nats"} <= {c.strip() for c in header.split("|")}
    ngram = [r for r in rows if "| ngram |" in r]
    assert ngram and all(r.rstrip(" |").split("|")[-1].strip() for r in ngram)  # a share for every drafting arm
    code, out, _ = jfbench("show", base_run, "--format", "csv")
    frame = pd.read_csv(io.StringIO(out))
    assert code == 0 and len(frame) == 6 and {"other_share", "speedup_decode_micro_lo", "budget_fill"} <= set(frame)
    code, out, _ = jfbench("show", base_run, "--format", "json", "--table", "cells")
    assert code == 0 and len(json.loads(out)) == 6
    code, _, err = jfbench("show", base_run.parent / "nothing")
    assert code == 2 and "holds no jfbench run" in err


def test_resume_after_crashes_between_and_inside_cells(target, base_run, tmp_path, monkeypatch):
    """A crash between pairing groups keeps the stored cells; a crash inside a group keeps the rounds
    it finished (each cell's journal), and the resume decodes only the rest, to the same rows an
    unbroken run gives."""
    out = tmp_path / "run"
    real_decode, calls = driver.decode_batch, []

    def counting(crash_at: int | None):
        def decode_batch(engine, cell, chunk, *args, **kwargs):
            calls.append(cell.cell_id)
            if len(calls) == crash_at:
                raise KeyboardInterrupt
            return real_decode(engine, cell, chunk, *args, **kwargs)

        return decode_batch

    # bs 1: 3 rounds x 4 slots (AR, ngram B4, ngram B16, AR's A/A copy); the 13th decode is bs 2's first
    monkeypatch.setattr(driver, "decode_batch", counting(crash_at=13))
    assert jfbench(*sweep_args(target, out))[0] == 130  # Ctrl-C
    assert len(list((out / "cells").glob("*.json"))) == 3 and not (out / "partial").exists()

    calls.clear()
    monkeypatch.setattr(driver, "decode_batch", counting(crash_at=5))  # dies in bs 2's second round
    assert jfbench(*sweep_args(target, out))[0] == 130
    assert len(list((out / "cells").glob("*.json"))) == 3  # the half-run group left nothing that counts
    halves = sorted((out / "partial").iterdir())
    assert len(halves) == 3 and all([p.name for p in h.iterdir()] == ["batch-0000.json"] for h in halves)
    code, shown, _ = jfbench("show", out)
    assert code == 0 and "3/6 cells (+ 3 unfinished, 3 prompt batch(es) decoded so far" in shown

    calls.clear()
    monkeypatch.setattr(driver, "decode_batch", counting(crash_at=None))
    code, _, err = jfbench(*sweep_args(target, out))
    assert code == 0, err
    assert len(calls) == 4 and "3 cell(s) run, 3 already done" in err  # one round left; finished cells kept
    assert err.count("1 prompt batch(es) decoded by an earlier session were reused") == 3, err
    assert not (out / "partial").exists()  # the journal goes once its cell is stored
    sessions = json.loads((out / "manifest.json").read_text())["sessions"]
    assert len(sessions) == 3
    record = json.loads((out / "cells" / f"{halves[1].name}.json").read_text())
    assert record["resumed"] == {sessions[1]["session"]: 1} and record["session"] == sessions[2]["session"]
    t, base = _tables(out), _tables(base_run)
    assert len(t["summary"]) == 6 and not t["requests"].duplicated([*CELL_KEYS, "request"]).any()
    for name, columns in (("requests", ["output_ids", "steps", "accepted"]), ("steps", ["batch_step", "drafted", "accepted"])):
        keys = [*CELL_KEYS, "request", *(["step"] if name == "steps" else [])]
        mine, theirs = (frame[name].sort_values(keys).reset_index(drop=True) for frame in (t, base))
        assert mine[keys + columns].astype(str).equals(theirs[keys + columns].astype(str)), name  # same rows as unbroken
    assert (t["cells"]["wall_s"] > 0).all()
    resumed = t["requests"][t["requests"]["batch_size"] == 2]
    # each batch keeps the session that timed it and its own round's baseline, whichever session that was
    assert resumed.groupby("request")["session"].first().tolist() == [sessions[1]["session"]] * 2 + [sessions[2]["session"]]
    assert resumed["base_decode_s"].notna().all() and t["summary"]["speedup_decode_micro"].notna().all()


def test_show_says_how_far_a_first_cell_got_before_any_cell_finished(tmp_path):
    run = tmp_path / "run"
    (run / "partial" / "gsm8k__ngram__default__B4__bs1__r0").mkdir(parents=True)
    for index in range(3):
        (run / "partial" / "gsm8k__ngram__default__B4__bs1__r0" / f"batch-{index:04d}.json").write_text("{}")
    (run / "manifest.json").write_text('{"config_hash": "h"}')
    code, _, err = jfbench("show", run)
    assert code == 2 and "no cell has finished yet; 1 unfinished, 3 prompt batch(es) decoded so far" in err


def test_a_damaged_cell_part_is_named_by_readers_and_redone_by_the_resume(target, base_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(base_run, out)
    part = sorted((out / "cells").glob("*.steps.parquet"))[0]
    part.write_bytes(part.read_bytes()[:100])  # a half-copied file
    for command in (["show", out], ["check", "--run", out, "--baseline", base_run],
                    ["report", out, "--out", tmp_path / "r.html"]):
        code, _, err = jfbench(*command)
        assert code == 0, (command, err)
        assert err.count(part.name) == 1 and "warning:" in err and "Traceback" not in err, command
    code, _, err = jfbench(*sweep_args(target, out))
    assert code == 0, err
    assert err.count("will run again") == 1 and f"{part} is unreadable" in err
    assert "1 cell(s) run, 5 already done" in err
    assert len(pd.read_parquet(out / "summary.parquet")) == 6 and len(pd.read_parquet(part)) > 0
    (out / "summary.parquet").write_bytes(b"PAR1")
    code, _, err = jfbench("show", out)
    assert code == 0 and "showing summary.csv instead" in err  # the twin stands in
    (out / "summary.csv").write_text("")
    for command in (["show", out], ["report", out, "--out", tmp_path / "r.html"]):
        code, out_text, err = jfbench(*command)
        last = err.splitlines()[-1]
        assert code == 2 and last.startswith("error: ") and "summary.parquet is unreadable" in last, (command, err)
        assert out_text == "" and "Traceback" not in err


def test_a_published_folder_of_summary_csv_and_manifest_alone_shows(base_run, tmp_path):
    out = tmp_path / "published"
    out.mkdir()
    for name in ("summary.csv", "manifest.json"):  # how results/baselines keeps some runs
        shutil.copy(base_run / name, out / name)
    code, text, err = jfbench("show", out)
    assert code == 0 and "warning" not in err, err
    assert "6/6 cells" in text  # counted from the summary: there is no cells/ folder
    code, full, _ = jfbench("show", base_run, "--format", "csv")
    code, kept, _ = jfbench("show", out, "--format", "csv")
    assert code == 0 and pd.read_csv(io.StringIO(kept))["tau"].tolist() == pd.read_csv(io.StringIO(full))["tau"].tolist()


def test_a_grid_whose_kv_cache_cannot_fit_is_refused_before_any_cell(target, tmp_path):
    out = tmp_path / "run"
    code, stdout, err = jfbench(*sweep_args(target, out, "--max-memory", "1KiB"))
    assert code == 2 and stdout == "" and err.count("\n") == 1, err
    assert "largest KV cache (gsm8k, batch 2 x (" in err and "--max-memory allows 0.00 GiB" in err
    assert not list(out.glob("cells/*"))  # refused before the first cell


def test_code_suites_say_once_and_in_the_manifest_when_there_is_no_network_namespace(target, tmp_path, monkeypatch):
    from suites import sandbox

    monkeypatch.setattr(sandbox, "network_namespace_prefix", lambda: ())
    monkeypatch.setattr(sandbox, "_announced", False)
    args = sweep_args(target, tmp_path / "run")
    args[args.index("--suites") + 1], args[args.index("--budgets") + 1] = "humaneval", "4"
    args[args.index("--batch-sizes") + 1], args[args.index("--limit") + 1] = "1", "2"
    code, _, err = jfbench(*args)
    assert code == 0, err
    assert err.count("without a network namespace") == 1
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["code_sandbox"] == {"network_namespace": False, "note": sandbox.NO_NAMESPACE_NOTE}


@pytest.mark.slow  # ~25 s: a fresh process imports torch and loads the target
def test_kill_9_mid_run_then_the_same_command_completes(target, tmp_path):
    out = tmp_path / "run"
    args = sweep_args(target, out)
    args[args.index("--budgets") + 1] = "2,4,8,16"
    env = {**os.environ, "JFBENCH_DEBUG": "1"}
    console_script = Path(sys.executable).parent / "jfbench"
    proc = subprocess.Popen([console_script, *args], env=env, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not list((out / "cells").glob("*.json")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    finished_before = len(list((out / "cells").glob("*.json")))
    assert 1 <= finished_before < 10, "the run ended before it could be killed"
    code, _, err = jfbench(*args)
    assert code == 0, err
    assert f"{10 - finished_before} cell(s) run, {finished_before} already done" in err
    t = _tables(out)
    assert len(t["summary"]) == 10 and not t["steps"].duplicated([*CELL_KEYS, "request", "step"]).any()


def test_another_config_or_a_held_lock_is_refused(target, base_run, tmp_path):
    code, _, err = jfbench(*sweep_args(target, base_run, "--seed", "1"))
    assert code == 2 and "holds a run of another config" in err and "--force" in err
    lock = RunLock(base_run)
    lock.acquire()
    try:
        code, _, err = jfbench(*sweep_args(target, base_run))
    finally:
        lock.release()
    assert code == 2 and "in use by another sweep" in err and err.count("\n") == 1
    out = tmp_path / "forced"
    assert jfbench(*sweep_args(target, out, "--budgets", "4", "--batch-sizes", "1"))[0] == 0
    code, _, err = jfbench(*sweep_args(target, out, "--force", "--budgets", "1024", "--batch-sizes", "1"))
    assert code == 0 and "drafted at most" in err and "of 1023 nodes at budget 1024" in err
    summary = pd.read_parquet(out / "summary.parquet")
    assert set(summary["budget"]) == {1, 1024}  # the old config's cells are gone


def test_a_grown_grid_keeps_the_finished_cells(target, tmp_path):
    out = tmp_path / "run"
    assert jfbench(*sweep_args(target, out, "--budgets", "4", "--batch-sizes", "1"))[0] == 0
    first = pd.read_parquet(out / "requests.parquet")
    code, _, err = jfbench(*sweep_args(target, out, "--budgets", "4,16", "--batch-sizes", "1"))
    assert code == 0 and "grid changed" in err and "1 cell(s) run, 2 already done" in err
    grown = pd.read_parquet(out / "requests.parquet")
    kept = grown[grown["budget"].isin([1, 4])].reset_index(drop=True)
    pd.testing.assert_frame_equal(kept, first.reset_index(drop=True))  # the same measurements, not re-runs
    assert set(grown["budget"]) == {1, 4, 16} and json.loads((out / "manifest.json").read_text())["n_cells"] == 3


def test_cells_timed_in_a_copy_of_the_folder_count_once_copied_back(target, tmp_path):
    # The several-cores recipe of docs/robustness.md: one sweep writes a folder at a time, so arms run
    # in copies of it and their cells are copied back. Bugs caught: a resume that re-runs a copied-back
    # cell, one that keeps a cell measured under other settings (here: fewer new tokens), or a manifest
    # that does not say which command timed a copied-back cell.
    out, side, other = tmp_path / "run", tmp_path / "side", tmp_path / "other"
    grid = ("--budgets", "4,16", "--batch-sizes", "1")
    assert jfbench(*sweep_args(target, out, "--budgets", "4", "--batch-sizes", "1"))[0] == 0
    shutil.copytree(out, side)
    assert jfbench(*sweep_args(target, side, *grid))[0] == 0
    for part in (side / "cells").glob("*__B16__*"):
        shutil.copy2(part, out / "cells")
    code, _, err = jfbench(*sweep_args(target, out, *grid))
    assert code == 0 and "0 cell(s) run, 3 already done" in err, err
    copied = pd.read_parquet(out / "requests.parquet").query("budget == 16").reset_index(drop=True)
    timed = pd.read_parquet(side / "requests.parquet").query("budget == 16").reset_index(drop=True)
    pd.testing.assert_frame_equal(copied, timed)  # the side folder's measurements, not a re-run
    manifest = json.loads((out / "manifest.json").read_text())  # where the copied-back cell came from
    side_session = json.loads((side / "manifest.json").read_text())["sessions"][-1]
    adopted = manifest["adopted_cells"]
    assert set(adopted) == {p.stem for p in (side / "cells").glob("*__B16__*.json")} and "note: 1 finished cell(s)" in err
    assert all(a["session"] == side_session["session"] and "4,16" in a["command"] for a in adopted.values())
    assert side_session["session"] not in {s["session"] for s in manifest["sessions"]}

    assert jfbench(*sweep_args(target, other, *grid, "--max-new-tokens", "8"))[0] == 0
    for part in (other / "cells").glob("*__B16__*"):
        shutil.copy2(part, out / "cells")
    code, _, err = jfbench(*sweep_args(target, out, *grid))
    assert code == 0 and "1 cell(s) run, 2 already done" in err, err
    record = next((out / "cells").glob("*__B16__*.json")).read_text()
    assert record != next((other / "cells").glob("*__B16__*.json")).read_text()  # re-timed under its own config
    assert json.loads(record)["config_hash"] == json.loads(next((side / "cells").glob("*__B16__*.json")).read_text())["config_hash"]
    assert "adopted_cells" not in json.loads((out / "manifest.json").read_text())  # re-timed here: its own session


def test_temperature_axis_adds_sampled_cells_to_a_greedy_run(target, base_run, tmp_path):
    # Bugs caught: sampled cells paired with the greedy baseline, the temperature missing from rows,
    # a greedy run's finished cells re-run (or changed) when the axis grows, streams tied to batch rows.
    out = tmp_path / "run"
    assert jfbench(*sweep_args(target, out))[0] == 0
    code, stdout, err = jfbench(*sweep_args(target, out, "--temperatures", "0,1"))
    assert code == 0 and "6 cell(s) run, 6 already done" in err, err
    t = _tables(out)
    assert all(set(t[n]["temperature"]) == {0.0, 1.0} for n in t)
    greedy = _tables(base_run)["requests"].set_index(["budget", "batch_size", "request"])["output_ids"]
    requests = t["requests"].set_index(["temperature", "budget", "batch_size", "request"])
    for key, ids in greedy.items():
        assert list(requests.loc[(0.0, *key), "output_ids"]) == list(ids)  # T = 0 is unchanged greedy
    sampled = t["requests"][t["requests"]["temperature"] == 1.0]
    assert sampled["lossless"].all() and t["summary"]["lossless_unexcused"].eq(0).all()
    assert (sampled.set_index(["drafter", "budget", "batch_size", "request"])["output_ids"].map(tuple)
            != t["requests"][t["requests"]["temperature"] == 0].set_index(
                ["drafter", "budget", "batch_size", "request"])["output_ids"].map(tuple)).any()  # it samples
    by_batch = sampled.groupby(["drafter", "budget", "request"])["output_ids"].agg(lambda s: len({tuple(x) for x in s}))
    assert (by_batch == 1).all()  # a request draws the same tokens at batch size 1 and 2
    assert sampled["first_divergence"].isna().mean() > 0.9  # arms share the streams: text = AR sampling's
    assert sorted(p.name for p in (out / "cells").glob("*__T1.json"))
    code, stdout, _ = jfbench("show", out)
    assert code == 0 and "distribution-preserving" in stdout


def test_strict_fails_after_writing_results_on_unexcused_divergence(target, tmp_path, monkeypatch):
    monkeypatch.setattr(driver, "judge", lambda *args: Verdict(False, False, 3, 0.5))
    out = tmp_path / "run"
    code, _, err = jfbench(*sweep_args(target, out, "--budgets", "4", "--batch-sizes", "1", "--strict"))
    assert code == 1 and "diverge from the AR baseline" in err
    requests = pd.read_parquet(out / "requests.parquet")
    arm = requests[requests["drafter"] == "ngram"]
    assert (~arm["lossless"]).all() and (arm["first_divergence"] == 3).all()
    assert pd.read_parquet(out / "summary.parquet").set_index("drafter").loc["ngram", "lossless_unexcused"] == 3


def test_tie_check_logits_are_the_target_forward(target):
    engine = HFEngine.load(str(target), "cpu", "float32")
    context = [3, 9, 4, 4, 17]
    with torch.no_grad():
        expected = engine.target.model(torch.tensor([context])).logits[0, -1].float()
    torch.testing.assert_close(engine.next_token_logits(context), expected, atol=1e-4, rtol=0)


def test_ablate_option_variants_of_ngram(target, tmp_path):
    out = tmp_path / "ablation"
    code, _, err = jfbench(
        "ablate", "--target", target, "--out", out, "--drafter", "ngram", "--option", "max_ngram=1,2",
        "--suites", "gsm8k", "--budgets", "8", "--repeats", "1", "--limit", "3", "--max-new-tokens", "12",
        "--data-dir", DATA, "--threads", "1", "--no-progress",
    )
    assert code == 0, err
    table = pd.read_parquet(out / "ablation.parquet")
    assert sorted(table["variant"]) == ["max_ngram=1", "max_ngram=2"] and (table["n_prompts"] == 3).all()
    assert (table["tau_delta_lo"] <= table["tau_delta"]).all() and (table["tau_delta"] <= table["tau_delta_hi"]).all()
    code, text, _ = jfbench("show", out, "--format", "markdown")
    assert code == 0 and "ngram[max_ngram=2]" in text and "d tau" in text
    code, text, _ = jfbench("show", out)
    assert code == 0 and "ngram[max_ngram=1]" in text  # not swallowed as rich markup


def test_sweep_arms_with_options_are_named_by_them(target, tmp_path):
    out = tmp_path / "arms"
    args = sweep_args(target, out)
    args[args.index("--drafters") + 1] = "ngram,ngram[max_ngram=1,max_depth=2]"
    args[args.index("--budgets") + 1] = "8"
    args[args.index("--batch-sizes") + 1] = "1"
    code, _, err = jfbench(*args)
    assert code == 0, err
    summary = pd.read_parquet(out / "summary.parquet")
    assert set(summary["variant"]) == {"default", "max_depth=2,max_ngram=1"}
    steps = pd.read_parquet(out / "steps.parquet")
    assert steps[steps["variant"] != "default"]["accepted"].max() <= 2  # the option reached the drafter
    code, text, _ = jfbench("show", out, "--format", "markdown")
    assert code == 0 and "ngram[max_depth=2,max_ngram=1]" in text
    code, text, _ = jfbench("sweep", "--help")
    assert "NAME[KEY=VALUE,...]" in " ".join(text.split()) and "eagle[depth=8]=H/ea" in text  # not eaten as markup


@pytest.mark.slow  # trains the micro target once per cache (~1-2 min), then ~20 s
def test_grid_of_2_suites_2_budgets_2_batch_sizes_on_the_micro_target(micro_target, tmp_path):
    out = tmp_path / "micro"
    code, _, err = jfbench(
        "sweep", "--target", micro_target, "--out", out, "--drafters", "ngram", "--suites", "gsm8k,math500",
        "--budgets", "4,32", "--batch-sizes", "1,2", "--repeats", "1", "--limit", "3", "--max-new-tokens", "24",
        "--data-dir", DATA, "--threads", "1", "--no-progress", "--strict",
    )
    assert code == 0, err  # --strict: every request equals its AR baseline token for token (or is an fp tie)
    t = _tables(out)
    assert len(t["summary"]) == 2 * 2 * (1 + 2)
    assert set(t["summary"]["suite"]) == {"gsm8k", "math500"} and set(t["summary"]["batch_size"]) == {1, 2}
    arms = t["summary"][t["summary"]["drafter"] == "ngram"]
    assert (arms["tau"] >= 1).all() and arms["speedup_decode_micro"].notna().all()
    assert t["requests"]["correct"].notna().all()  # both suites score answers
    for _, group in t["requests"].groupby(["suite", "batch_size"]):  # same prompts in every arm
        assert group.groupby(["drafter", "budget"])["prompt_hash"].apply(tuple).nunique() == 1


def test_resume_on_other_prompts_is_refused(target, tmp_path):
    data = tmp_path / "data"
    (data / "gsm8k").mkdir(parents=True)
    lines = (DATA / "gsm8k" / "test.jsonl").read_text().splitlines()[:3]
    (data / "gsm8k" / "test.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    args = sweep_args(target, out, "--budgets", "4", "--batch-sizes", "1")
    args[args.index("--data-dir") + 1] = str(data)
    assert jfbench(*args)[0] == 0
    edited = json.loads(lines[0])
    edited["question"] += " Answer in words."
    (data / "gsm8k" / "test.jsonl").write_text("\n".join([json.dumps(edited), *lines[1:]]) + "\n")
    code, _, err = jfbench(*args)
    assert code == 2 and "now yields other prompts" in err
