"""vLLM engine pieces that need no vLLM: /metrics parsing and differencing, step rows, arms, errors."""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path

import httpx
import pytest

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.runtime import core_list, cpu_cores
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.integrations.vllm_arms import VLLMArm, parse_arm
from jetflow_bench.integrations.vllm_metrics import (
    EMPTY,
    SpecCounters,
    spec_counters,
    step_rows,
)
from jetflow_bench.integrations.vllm_server import ManagedServer, ServerConfig, log_cause
from jetflow_bench.integrations.vllm_steps import _assign, batch_result

RECORDED = Path(__file__).parents[1] / "data" / "vllm_metrics"


def _recorded(name: str) -> str:
    return (RECORDED / name).read_text()


def test_counters_sum_label_sets_and_keep_positions_apart():
    # Bug: labels dropped (per-position counters collapse into one), engines not summed, or the
    # `_created` timestamps counted as drafts.
    p = "vllm:spec_decode_"
    text = (f"# HELP {p}num_drafts_total d\n# TYPE {p}num_drafts counter\n"
            f'{p}num_drafts_total{{engine="0"}} 3.0\n{p}num_drafts_total{{engine="1"}} 2.0\n'
            f'{p}num_drafts_created{{engine="0"}} 1.7e9\n'
            f'{p}num_accepted_tokens_per_pos_total{{position="1",engine="0"}} 1.0\n'
            f'{p}num_accepted_tokens_per_pos_total{{position="0",engine="0"}} 4.0\n')
    counters = spec_counters(text)
    assert counters.drafts == 5 and counters.per_pos == (4, 1)


def test_recorded_metrics_of_an_idle_ngram_server_are_zero_with_its_positions():
    # Bug: a fresh server's counters misread (e.g. _created gauges taken for counts).
    counters = spec_counters(_recorded("ngram_k4_idle.txt"))
    assert counters.drafts == counters.draft_tokens == counters.accepted == 0
    assert counters.positions in (0, 4)  # some versions only export a position once it was seen


def test_recorded_metrics_difference_gives_a_consistent_histogram():
    # Bug: differencing the wrong series, or per-position counts read as "exactly k accepted".
    before = spec_counters(_recorded("ngram_k4_idle.txt"))
    after = spec_counters(_recorded("ngram_k4_after.txt"))
    diff = after - before
    assert diff.drafts > 0 and diff.draft_tokens >= diff.drafts
    hist = diff.histogram()
    assert sum(hist) == diff.drafts
    assert sum(k * n for k, n in enumerate(hist)) == diff.accepted
    assert list(diff.per_pos) == sorted(diff.per_pos, reverse=True)  # acceptance is a prefix


def test_plain_server_has_no_spec_counters():
    # Bug: a plain-decoding server's missing series raise instead of reading as "no drafts".
    assert spec_counters(_recorded("plain_after.txt")) == EMPTY


def test_counters_sum_over_engines_and_difference():
    # Bug: with several engines (data parallel) only one engine's series is read.
    text = "\n".join([
        'vllm:spec_decode_num_drafts_total{engine="0"} 4', 'vllm:spec_decode_num_drafts_total{engine="1"} 6',
        'vllm:spec_decode_num_draft_tokens_total{engine="0"} 12', 'vllm:spec_decode_num_accepted_tokens_total 7',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 5',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",position="0"} 0',
        'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="1"} 2',
        'vllm:spec_decode_num_drafts_created 1.7e9',
    ])
    now = spec_counters(text)
    assert now == SpecCounters(10, 12, 7, (5, 2))
    assert now - SpecCounters(2, 3, 1, (1,)) == SpecCounters(8, 9, 6, (4, 2))


def test_counters_that_go_down_mean_a_restart():
    # Bug: a restarted server's counters differenced into negative "drafts".
    with pytest.raises(ValueError, match="restarted"):
        SpecCounters(1, 2, 1, (1,)) - SpecCounters(5, 10, 3, (2,))


def test_histogram_worked_example_and_inconsistency():
    # The module docstring's example; bug: an off-by-one between positions and accepted lengths.
    assert SpecCounters(10, 30, 10, (6, 3, 1)).histogram() == [4, 3, 2, 1]
    with pytest.raises(ValueError, match="inconsistent"):
        SpecCounters(10, 30, 9, (6, 3, 1)).histogram()


def test_step_rows_add_up_to_the_counters_and_the_tokens():
    # Bug: steps without a draft dropped (τ per draft, not per step) or tokens counted twice.
    counters = SpecCounters(3, 9, 3, (2, 1, 0))
    rows = step_rows(counters, decoded_tokens=10)
    assert len(rows) == 7  # 10 decoded tokens - 3 accepted
    assert sum(r.accepted for r in rows) == 3 and sum(r.drafted for r in rows) == 9
    assert sum(r.emitted for r in rows) == 10
    assert sum(1 for r in rows if r.drafted) == 3
    tau = 1 + sum(r.accepted for r in rows) / len(rows)
    assert tau == pytest.approx(1 + 3 / 7)


def test_plain_decoding_rows_are_one_token_per_step():
    rows = step_rows(EMPTY, decoded_tokens=5)
    assert [(r.drafted, r.accepted, r.emitted) for r in rows] == [(0, 0, 1)] * 5


def test_assign_splits_steps_so_each_request_adds_up():
    # Bug: rows pinned to request 0, so per-request tokens and steps disagree with the outputs.
    rows = step_rows(SpecCounters(2, 4, 3, (2, 1)), decoded_tokens=7)
    records = _assign(rows, [5, 2], budget=3, active=2)
    per = {r: sum(s.emitted for s in records if s.request == r) for r in (0, 1)}
    assert per == {0: 5, 1: 2}
    assert all(math.isnan(s.verify_s) for s in records)
    steps_of = [sorted(s.step for s in records if s.request == r) for r in (0, 1)]
    assert all(steps == list(range(len(steps))) for steps in steps_of)


def test_batch_result_applies_jfbench_stop_rule_to_vllm_tokens():
    # Bug: vLLM's tokens past jfbench's stop (EOS 0 here) kept, so outputs differ from jfbench's AR.
    from jetflow_bench.integrations.vllm_client import Completion

    stop = StopRule(8, frozenset({0}))
    done = [Completion([5, 6, 0, 9], [1, 1, 1, 1], "stop", 0.0, 0.1, 0.3)]
    result = batch_result([[1, 2]], done, stop, budget=1, counters=EMPTY, start=0.0)
    (request,) = result.requests
    assert request.output_tokens == [5, 6, 0] and request.finish_reason == "eos"
    assert request.steps == 2 and request.ttft_s == pytest.approx(0.1)


@pytest.mark.parametrize(("name", "ckpt", "message"), [
    ("vllm:ngarm", None, "did you mean vllm:ngram"),
    ("vllm:eagle", None, "vllm:eagle=PATH"),
    ("vllm:dflash", None, "vllm:dflash=PATH"),  # bug: a DFlash server started without its head
    ("vllm:none", "/x", "takes no model"),
])
def test_parse_arm_errors_name_the_fix(name, ckpt, message):
    with pytest.raises(JfbenchError, match=message):
        parse_arm(name, ckpt, ("ngram", "suffix", "eagle", "dflash"))


def test_arm_options_go_into_the_speculative_config():
    # Bug: bracket options dropped (every ngram variant measured with vLLM's defaults), or allowed
    # to override the budget's num_speculative_tokens.
    arm = parse_arm("vllm:ngram", None, ("ngram",), {"prompt_lookup_max": 3})
    assert arm.speculative_config(5) == {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 3}
    with pytest.raises(JfbenchError, match="num_speculative_tokens is set by"):
        parse_arm("vllm:ngram", None, ("ngram",), {"num_speculative_tokens": 9})


def test_arm_budget_maps_to_num_speculative_tokens():
    # Bug: B passed as num_speculative_tokens (one more draft token than jfbench's drafters get).
    assert parse_arm("VLLM:ngram", None, ("ngram",)).speculative_config(5) == {
        "method": "ngram", "num_speculative_tokens": 4}
    assert VLLMArm("eagle", "/h").speculative_config(3) == {"method": "eagle", "num_speculative_tokens": 2,
                                                            "model": "/h"}
    assert VLLMArm("none").speculative_config(8) is None
    with pytest.raises(JfbenchError, match="B >= 2"):
        VLLMArm("ngram").speculative_config(1)


def test_log_cause_names_the_port_or_the_last_error(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("INFO start\nERROR: [Errno 98] error while attempting to bind: address already in use\n")
    assert log_cause(log) == "its port is already in use"
    log.write_text("INFO a\nTraceback (most recent call last):\nOSError: /nope is not a model folder\nINFO bye\n")
    assert log_cause(log) == "OSError: /nope is not a model folder"


def _fake_bin(tmp_path: Path) -> str:
    script = tmp_path / "vllm"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {Path(__file__).parents[1] / 'helpers' / 'fake_vllm.py'} \"$@\"\n")
    script.chmod(0o755)
    return str(script)


def test_managed_server_that_cannot_start_names_cause_and_log(tmp_path, monkeypatch):
    # Bug: a dead start-up waited on until the timeout, or reported without the log's cause.
    monkeypatch.setenv("FAKE_VLLM_FAIL_START", "1")
    log = tmp_path / "run" / "vllm" / "01.log"
    server = ManagedServer(_fake_bin(tmp_path), ServerConfig("/nope", "float32", None, 1), log)
    with pytest.raises(JfbenchError) as err:
        server.start()
    assert "/nope is not a model folder" in str(err.value) and str(log) in str(err.value)


def test_managed_server_on_a_taken_port_is_refused(tmp_path):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        server = ManagedServer(_fake_bin(tmp_path), ServerConfig("/m", "float32", None, 1), tmp_path / "l.log",
                               port=port)
        with pytest.raises(JfbenchError, match=f"port {port} .*already in use"):
            server.start()


def test_managed_server_starts_bound_to_the_given_cores(tmp_path, monkeypatch):
    # Bug: the binding computed but not handed to the server (vLLM's CPU build then binds every core
    # of its NUMA node), or jfbench's own OMP_NUM_THREADS leaking through instead of the core count.
    seen = tmp_path / "env.json"
    monkeypatch.setenv("FAKE_VLLM_ENV_OUT", str(seen))
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    for cpus, bind in (((1,), "1"), ((0, 1, 2, 5), "0-2,5"), ((), None)):
        server = ManagedServer(_fake_bin(tmp_path), ServerConfig("/m", "float32", None, 1, cpus=cpus), tmp_path / "l.log")
        server.start()
        server.stop()
        env = json.loads(seen.read_text())
        assert env.get("VLLM_CPU_OMP_THREADS_BIND") == bind
        assert env["OMP_NUM_THREADS"] == (str(len(cpus)) if cpus else "7")
        assert env["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert "VLLM_CPU_OMP_THREADS_BIND=0-2,5 " in (tmp_path / "l.log").read_text()  # the log says how it ran


def test_cpu_cores_are_the_first_allowed_ones(monkeypatch):
    # Bug: cores outside the process's affinity mask, or more threads than cores bound silently twice.
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {7, 3, 5}, raising=False)
    assert cpu_cores(1) == (3,) and cpu_cores(3) == (3, 5, 7)
    with pytest.raises(JfbenchError, match=r"--threads 4: .* only 3 CPUs \(3,5,7\)"):
        cpu_cores(4)


def test_bench_baseline_against_vllm_binds_the_server_to_jfbench_cores(cli, tmp_path, monkeypatch):
    # Bugs: `--threads 1` reaches jfbench only while vLLM decodes on other cores or as many threads
    # as it likes; jfbench's process not pinned to the cores vLLM is bound to; pairs lost.
    from jetflow_bench.cli import bench_cmd
    from jetflow_bench.integrations import vllm_plain
    from tests.helpers.data_dirs import benchmark_data_dir
    from tests.helpers.random_models import save_random_model

    pinned = []
    monkeypatch.setattr(bench_cmd, "pin_cores", pinned.append)
    monkeypatch.setattr(vllm_plain, "SETTLE_S", 0.0)  # the stand-in has no worker to wait for
    seen = tmp_path / "env.json"
    monkeypatch.setenv("FAKE_VLLM_ENV_OUT", str(seen))
    target = save_random_model(tmp_path / "model")
    code, out, err = cli("bench", "baseline", "--against", "vllm", "--vllm-bin", _fake_bin(tmp_path), "--target",
                         str(target), "--data-dir", str(benchmark_data_dir()), "--batch-sizes", "1,2",
                         "--max-new-tokens", "5", "--pairs", "3", "--threads", "1", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert [r["batch"] for r in rows] == [1, 2] and all(r["pairs"] == 3 for r in rows)
    assert all(r["same tokens"] == "no" for r in rows)  # the stand-in answers token 7 throughout
    env = json.loads(seen.read_text())
    assert pinned == [cpu_cores(1)]
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == core_list(cpu_cores(1)) and env["OMP_NUM_THREADS"] == "1"
    assert f"VLLM_CPU_OMP_THREADS_BIND={core_list(cpu_cores(1))}" in err  # the binding is reported


def test_streamed_steps_worked_example():
    # The docstring's example; bug: rejected drafts dropped from α's denominator, or τ per draft.
    from jetflow_bench.integrations.vllm_steps import streamed_steps

    steps = streamed_steps([[1, 1, 3, 1]], SpecCounters(2, 6, 2, (1, 1)), budget=5)
    assert [(s.drafted, s.accepted, s.emitted) for s in steps] == [(2, 0, 1), (4, 2, 3), (0, 0, 1)]


def test_streamed_steps_refuse_merged_chunks():
    # Bug: two engine steps merged into one chunk (a server that fell behind) read as one step
    # with an extra accepted token, inflating τ.
    from jetflow_bench.integrations.vllm_steps import streamed_steps

    # vLLM counted 2 drafts with 1 accepted token; the stream shows 2 accepted: two steps were merged.
    assert streamed_steps([[1, 2, 2]], SpecCounters(2, 4, 1, (1,)), budget=3) is None
    assert streamed_steps([[2, 1]], EMPTY, budget=1) is None  # prefill's chunk holds 2 tokens
    plain = streamed_steps([[1, 1, 1], [1, 1]], EMPTY, budget=1)
    assert [(s.request, s.step, s.accepted) for s in plain] == [(0, 0, 0), (0, 1, 0), (1, 0, 0)]


def test_batch_result_from_the_recorded_stream():
    # The real request behind ngram_k4_after.txt: 12 tokens in chunks 1,1,1,1,1,1,1,2,3 (max_tokens
    # cut the last step's bonus). Bug: steps counted from the counters (7) instead of the stream (8).
    from jetflow_bench.integrations.vllm_client import Completion

    counters = spec_counters(_recorded("ngram_k4_after.txt")) - spec_counters(_recorded("ngram_k4_idle.txt"))
    tokens = [19] + [18] * 11
    done = [Completion(tokens, [1, 1, 1, 1, 1, 1, 1, 2, 3], "length", 0.0, 0.1, 1.0)]
    result = batch_result([[5, 6, 7, 8, 9, 10]], done, StopRule(12, frozenset({0})), 5, counters, 0.0)
    assert result.requests[0].steps == 8
    assert sum(s.accepted for s in result.steps) == 3 and sum(s.drafted for s in result.steps) == 4


def test_plain_vllm_runs_once_per_batch_size_and_old_hashes_stay():
    # Bugs: vllm:none re-measured at every budget (two baselines per batch size), or the new
    # DrafterSpec field changing the hash of every earlier run (CI reference cells recomputed).
    from jetflow_bench.core.budget_policy import Budget
    from jetflow_bench.sweep.grid import DrafterSpec, SweepConfig, _identity, cells

    config = SweepConfig("t", (DrafterSpec("vllm:none", budgets=(Budget.fixed(1),)), DrafterSpec("vllm:ngram")),
                         ("gsm8k",), (Budget.fixed(4), Budget.fixed(8)), (1,), 1, "cpu", "float32", 1)
    assert [(c.drafter, c.budget.label) for c in cells(config)] == [("ar", "1"), ("vllm:none", "1"), ("vllm:ngram", "4"),
                                                                     ("vllm:ngram", "8")]
    assert "budgets" not in _identity(config)["drafters"][1] and "budgets" in _identity(config)["drafters"][0]


def test_spread_respects_caps():
    # Bug: drafted tokens spread evenly past num_speculative_tokens (a 6-token draft at k = 4).
    from jetflow_bench.integrations.vllm_steps import spread

    assert spread(7, [1, 4, 4]) == [1, 3, 3]
    assert spread(0, [0, 3]) == [0, 0]
    assert spread(2, [0, 0]) is None
    assert sorted(spread(9, [4, 4, 4])) == [3, 3, 3]


def test_streamed_drafts_never_exceed_the_budget():
    from jetflow_bench.integrations.vllm_steps import streamed_steps

    steps = streamed_steps([[1, 5, 1, 1, 2]], SpecCounters(3, 12, 5, (2, 1, 1, 1)), budget=5)
    assert sum(s.drafted for s in steps) == 12 and max(s.drafted for s in steps) <= 4
    assert streamed_steps([[1, 5, 1]], SpecCounters(1, 9, 4, (1, 1, 1, 1)), budget=5) is None  # 9 > 1 × 4


def test_vllm_arms_speedups_divide_by_vllm_plain_decoding():
    # Bug: vLLM arms' speed-ups divided by jfbench's AR (another engine), hiding vLLM's own gain.
    import pandas as pd

    from jetflow_bench.core.budget_policy import Budget
    from jetflow_bench.sweep.driver import GroupRunner
    from jetflow_bench.sweep.grid import Cell
    from jetflow_bench.sweep.tables import summary_table

    class Plain:  # the vLLM engine's rule: vLLM arms divide by vllm:none, the rest by AR
        def baseline_arm(self, drafter):
            return "vllm:none" if drafter not in (None, "vllm:none") else "ar"

    runner = GroupRunner.__new__(GroupRunner)
    runner.engine, runner.drafter = Plain(), lambda cell: None if cell.is_baseline else cell.drafter
    members = [Cell("s", name, "default", Budget.fixed(1), 1, 0) for name in ("ar", "vllm:none", "vllm:ngram")]
    assert [runner.base(c, members).drafter for c in members] == ["ar", "ar", "vllm:none"]  # timed in one round

    arms = [("ar", 1, "ar", 4.0, 4.0), ("vllm:none", 1, "ar", 2.0, 4.0), ("vllm:ngram", 4, "vllm:none", 1.0, 2.0)]
    steps, requests, cells = [], [], []
    for drafter, budget, baseline, decode_s, base_s in arms:
        keys = {"suite": "s", "drafter": drafter, "variant": "default", "budget": budget, "batch_size": 1,
                "repeat": 0, "temperature": 0.0, "load": ""}
        for request in range(2):
            steps.append({**keys, "request": request, "step": 0, "batch_step": request, "active": 1,
                          "drafted": 0, "accepted": 0, "emitted": 1, "depth": 0, "draft_s": 0.0,
                          "verify_s": 0.0, "other_s": 0.0})
            requests.append({**keys, "request": request, "prompt_tokens": 3, "new_tokens": 2, "ttft_s": 0.0,
                             "decode_s": decode_s, "steps": 1, "correct": pd.NA, "lossless": True,
                             "excused": False, "session": "s1", "base_decode_s": base_s, "base_ttft_s": 0.0,
                             "aa_decode_s": 4.0, "aa_ttft_s": 0.0})
        cells.append({**keys, "wall_s": 2 * decode_s, "drafted_mean": 0.0, "drafted_max": 0, "budget_fill": 0.0,
                      "peak_mem_bytes": 0, "engine": "x", "baseline": baseline, "config_hash": "h", "session": "s1",
                      "pairing": "interleaved"})
    summary = summary_table(pd.DataFrame(steps), pd.DataFrame(requests).astype({"correct": "boolean"}),
                            pd.DataFrame(cells), n_boot=10, seed=0).set_index("drafter")
    assert summary.loc["vllm:ngram", "speedup_decode_micro"] == pytest.approx(2.0)  # vs vllm:none
    assert summary.loc["vllm:none", "speedup_decode_micro"] == pytest.approx(2.0)  # vs jfbench AR
    assert summary.loc["ar", "speedup_decode_micro"] == pytest.approx(1.0)


def test_managed_server_dies_with_jfbench(tmp_path):
    # Bug: a sweep killed with SIGKILL (no finally, no atexit) leaves its vLLM server running.
    import subprocess
    import time

    from jetflow_bench.integrations.vllm_server import free_port, http_get

    port = free_port()
    code = "\n".join([
        "import time",
        "from pathlib import Path",
        "from jetflow_bench.integrations.vllm_server import ManagedServer, ServerConfig",
        f"s = ManagedServer({_fake_bin(tmp_path)!r}, ServerConfig('/m', 'float32', None, 1),"
        f" Path({str(tmp_path / 'l.log')!r}), port={port})",
        "s.start()",
        "print('up', flush=True)",
        "time.sleep(600)",
    ])
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "up"
        assert http_get(f"http://127.0.0.1:{port}/health")[0] == 200
    finally:
        parent.kill()
        parent.wait()
    for _ in range(50):
        try:
            http_get(f"http://127.0.0.1:{port}/health", timeout=1)
        except httpx.TransportError:
            return
        time.sleep(0.2)
    raise AssertionError("the server outlived the process that started it")


def test_managed_servers_are_kept_up_to_vllm_servers_and_the_least_recently_used_stops_first(tmp_path, monkeypatch):
    # Bug caught: a load sweep alternating vLLM arms restarting a server for every serving run, or
    # more servers left running than --vllm-servers (each holds its own memory).
    from types import SimpleNamespace

    from jetflow_bench.integrations import vllm_engine
    from jetflow_bench.integrations.vllm_engine import VLLMEngine, VLLMOptions

    events = []

    class Server:
        def __init__(self, bin, config, log, port=None):
            self.name, self.url = config.speculative["method"] if config.speculative else "none", "http://x"

        def start(self):
            events.append(f"start {self.name}")

        def stop(self):
            events.append(f"stop {self.name}")

    monkeypatch.setattr(vllm_engine, "ManagedServer", Server)
    monkeypatch.setattr(vllm_engine, "served_model", lambda url: {"id": "m"})
    hf = SimpleNamespace(tokenizer=None, eos_token_ids=(), target=SimpleNamespace(device=SimpleNamespace(type="cuda")))
    config = SimpleNamespace(target="/m", dtype="float32", batch_sizes=(4,), seed=0, threads=None)
    arms = {name: parse_arm(f"vllm:{name}", None, None) for name in ("none", "ngram", "suffix")}
    engine = VLLMEngine(hf, config, tmp_path, VLLMOptions(vllm_bin="vllm", servers=2), None)
    for name in ("none", "ngram", "none", "ngram", "suffix", "ngram"):
        engine._serve(arms[name], 4)
    assert events == ["start none", "start ngram", "stop none", "start suffix"]  # none, least recently used, goes
    engine.close()
    assert sorted(events[4:]) == ["stop ngram", "stop suffix"]
    with pytest.raises(JfbenchError, match="--vllm-servers"):
        VLLMOptions.resolve("vllm", None, 8000, None, 1, 1, servers=2)
