"""The vLLM engine's failure paths through `jfbench sweep`, on a scripted stand-in server (fake_vllm.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.helpers.data_dirs import benchmark_data_dir


def _sweep(cli, target: Path, out: Path, vllm_bin: str, *extra: str):
    return cli("sweep", "--engine", "vllm", "--vllm-bin", vllm_bin, "--target", str(target), "--drafters",
               "vllm:ngram", "--suites", "gsm8k", "--budgets", "3", "--limit", "2", "--max-new-tokens", "4",
               "--repeats", "2", "--no-progress", "--out", str(out), "--data-dir", str(benchmark_data_dir()), *extra)


def test_server_dying_mid_run_keeps_finished_cells_and_the_rerun_resumes(
    cli, micro_target, fake_bin, tmp_path, monkeypatch
):
    # Bugs: a dead server hangs the sweep or ends it with a traceback; its cells are lost; the
    # re-run redoes finished cells; the server is left running.
    out = tmp_path / "run"
    # A server dies after 3 completions, in repeat 1 (each repeat's cells are stored when its
    # interleaved rounds end): repeat 0's cells stay, repeat 1's are decoded again by the rerun.
    monkeypatch.setenv("FAKE_VLLM_DIE_AFTER", "3")
    monkeypatch.setenv("FAKE_VLLM_DIE_MARKER", str(tmp_path / "died"))
    code, _, err = _sweep(cli, micro_target, out, fake_bin)
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: ") and "died" in line and "fake engine core died" in line
    log = next((out / "vllm").glob("*.log"))
    assert str(log) in line
    done = sorted(p.stem for p in (out / "cells").glob("*.json"))
    assert done == ["gsm8k__ar__default__B1__bs1__r0", "gsm8k__vllm-ngram__default__B3__bs1__r0"]
    code, _, err = _sweep(cli, micro_target, out, fake_bin)
    assert code == 0, err
    assert "2 cell(s) run, 2 already done" in err
    assert len(list((out / "vllm").glob("*.log"))) == 2  # one log per server start


def test_managed_server_gets_jfbench_threads_and_the_manifest_says_so(cli, micro_target, fake_bin, tmp_path,
                                                                       monkeypatch):
    # Bug: `--threads 1` reaches jfbench's torch only, while vLLM decodes on every core it sees
    # (an unequal engine comparison), or the binding is not in the manifest.
    seen = tmp_path / "env.json"
    monkeypatch.setenv("FAKE_VLLM_ENV_OUT", str(seen))
    out = tmp_path / "run"
    code, _, err = _sweep(cli, micro_target, out, fake_bin, "--threads", "1")
    assert code == 0, err
    env = json.loads(seen.read_text())
    first = str(min(os.sched_getaffinity(0)))
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == first and env["OMP_NUM_THREADS"] == "1"
    recorded = json.loads((out / "manifest.json").read_text())["device_info"]["vllm"]["server_env"]
    assert recorded == {k: env[k] for k in recorded} and recorded["VLLM_CPU_OMP_THREADS_BIND"] == first


def test_vllm_arm_without_the_vllm_engine_says_so(cli, micro_target, tmp_path):
    code, _, err = cli("sweep", "--target", str(micro_target), "--drafters", "vllm:ngram", "--out", str(tmp_path / "o"))
    assert code == 2 and "add --engine vllm" in err


def test_engine_vllm_without_vllm_says_how_to_install(cli, micro_target, tmp_path, monkeypatch):
    # Bug: a missing vLLM surfaces as a traceback (FileNotFoundError) instead of the install command.
    from jetflow_bench.integrations import vllm_setup

    monkeypatch.setattr(vllm_setup, "default_bin", lambda: None)
    code, _, err = cli("sweep", "--engine", "vllm", "--target", str(micro_target), "--drafters", "vllm:none",
                       "--limit", "1", "--max-new-tokens", "2", "--out", str(tmp_path / "o"))  # fails fast, not a full sweep
    assert code == 2
    assert "vLLM is not installed" in err and "jfbench vllm setup" in err and len(err.strip().splitlines()) == 1
