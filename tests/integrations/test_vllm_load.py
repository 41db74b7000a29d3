"""vLLM arms on the load axis (`sweep --engine vllm --load`), against the stand-in server (fake_vllm.py):
the suite's client sends at jfbench's arrival times, keeps N in flight, and the latencies land in
the same columns and `show --table load` as jfbench's arms."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pandas as pd
import pytest

from jetflow_bench.integrations.vllm_client import Sampling, send_all
from jetflow_bench.integrations.vllm_server import ManagedServer, ServerConfig
from jetflow_bench.sweep.load import arrivals
from tests.helpers.data_dirs import benchmark_data_dir

# Long enough that a request is still streaming when the next of a closed loop arrives, even on a
# loaded 2-core machine (at 20 ms a busy CI box saw one request in flight where two were).
TOKEN_DELAY = 0.05


@pytest.fixture
def fake_stream(fake_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The stand-in `vllm`, streaming a token every `TOKEN_DELAY` s and logging each request as it arrives."""
    monkeypatch.setenv("FAKE_VLLM_TOKEN_DELAY", str(TOKEN_DELAY))
    monkeypatch.setenv("FAKE_VLLM_LOG", str(tmp_path / "requests.jsonl"))
    return fake_bin


def _logged(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]


def test_the_client_sends_at_jfbench_arrival_times_and_keeps_n_in_flight(fake_stream, tmp_path):
    # Bugs: requests sent all at once (or on another schedule than jfbench's engine gets for the
    # same seed), the wait for a slot left out of TTFT, or more than N requests in flight.
    server = ManagedServer(fake_stream, ServerConfig("/m", "float32", None, 1), tmp_path / "l.log")
    server.start()
    try:
        prompts = [[i] for i in range(6)]
        times = arrivals("poisson:4", len(prompts), seed=3, repeat=1)
        assert times[-1] > 0.5  # a spread the server can tell from all-at-once
        start = time.perf_counter()
        done = send_all(server.url, "/m", prompts, Sampling(4), times, 6, start)
        assert [d.sent - start for d in done] == pytest.approx(times, abs=1e-9)  # the schedule itself
        seen = {entry["prompt"][0]: entry["t"] for entry in _logged(tmp_path)}
        offsets = [seen[i] - seen[0] for i in range(len(prompts))]
        assert offsets == pytest.approx(times, abs=0.15)  # ... and when the server got them
        assert all(len(d.stamps) == len(d.chunks) == 4 and d.first - d.sent >= 0.015 for d in done)

        (tmp_path / "requests.jsonl").unlink()
        start = time.perf_counter()
        done = send_all(server.url, "/m", prompts, Sampling(4), None, 2, start)  # closed loop, N = 2
        assert max(entry["in_flight"] for entry in _logged(tmp_path)) == 2
        assert sorted(d.posted for d in done)[2] >= sorted(d.last for d in done)[0] - 0.01  # the third waits for a slot

        (tmp_path / "requests.jsonl").unlink()
        start = time.perf_counter()
        done = send_all(server.url, "/m", prompts, Sampling(4), [0.0] * 6, 2, start)  # all at once, 2 slots
        assert max(entry["in_flight"] for entry in _logged(tmp_path)) == 2
        assert max(d.first - d.sent for d in done) > 2 * 4 * TOKEN_DELAY  # the last two waited two requests' time
    finally:
        server.stop()


def test_a_vllm_load_sweep_writes_latencies_pairs_with_vllm_none_and_shows_the_load_table(
    cli, micro_target, fake_stream, tmp_path
):
    # Bugs: --load refused for --engine vllm; vLLM arms under load decoded as a plain batch (no
    # arrivals, no latency columns); vllm:ngram paired with jfbench's AR instead of vllm:none at
    # the same load; `show --table load` leaving the vLLM arms out.
    out = tmp_path / "run"
    code, _, err = cli("sweep", "--engine", "vllm", "--vllm-bin", fake_stream, "--target", str(micro_target),
                       "--drafters", "vllm:none,vllm:ngram", "--suites", "gsm8k", "--budgets", "3", "--limit", "4",
                       "--max-new-tokens", "4", "--batch-sizes", "2", "--repeats", "1", "--no-progress",
                       "--load", "poisson:4,concurrency:2", "--out", str(out), "--data-dir", str(benchmark_data_dir()))
    assert code == 0, err
    requests = pd.read_parquet(out / "requests.parquet")
    vllm = requests[requests["drafter"].str.startswith("vllm:")]
    assert len(vllm) == 2 * 2 * 4  # two arms, two loads, four requests
    assert vllm[["sent_s", "ttft_s", "tpot_s", "e2el_s", "base_decode_s"]].notna().all(axis=None)
    assert (vllm["tpot_s"] > 0.01).all() and (vllm["e2el_s"] > vllm["ttft_s"]).all()
    assert (vllm["itl_s"].map(len) == vllm["new_tokens"] - 1).all()  # a gap per streamed (one-token) chunk after the first

    config = json.loads((out / "manifest.json").read_text())["config"]
    schedule = arrivals("poisson:4", 4, seed=config["seed"], repeat=0)
    for drafter, rows in requests[requests["load"] == "poisson:4"].groupby("drafter"):
        assert rows.sort_values("request")["sent_s"].tolist() == pytest.approx(schedule, abs=1e-6), drafter
    assert max(entry["in_flight"] for entry in _logged(tmp_path)) <= 2  # never more than N = batch size

    by_arm = {d: rows.set_index(["load", "request"]) for d, rows in requests.groupby("drafter")}
    ngram, none = by_arm["vllm:ngram"], by_arm["vllm:none"]
    assert ngram["base_decode_s"].to_numpy() == pytest.approx(none.loc[ngram.index, "decode_s"].to_numpy())
    cells = pd.read_parquet(out / "cells.parquet").set_index("drafter")
    assert set(cells.loc["vllm:ngram", "baseline"]) == {"vllm:none"}

    code, stdout, err = cli("show", str(out), "--table", "load", "--format", "csv")
    assert code == 0, err
    table = pd.read_csv(io.StringIO(stdout))
    assert {"vllm:none", "vllm:ngram"} <= set(table["drafter"])
    assert table.loc[table["drafter"] == "vllm:ngram", "tpot_speedup"].notna().all()


def test_the_load_table_divides_a_vllm_arm_by_vllm_none_tokens_not_jfbench_ar():
    # Bug caught: plain decoding's TPOT for vllm:ngram taken as its paired decode time over jfbench
    # AR's token count (9 here) instead of vllm:none's (5): 0.8 s / 4 = 0.2 s per token, not 0.1.
    from jetflow_bench.report.load import load_table

    keys = {"suite": "s", "variant": "default", "batch_size": 2, "temperature": 0.0, "load": "poisson:2", "repeat": 0}
    rows, cell_rows = [], []
    for drafter, budget, tokens, baseline in (("ar", 1, 9, "ar"), ("vllm:none", 1, 5, "ar"), ("vllm:ngram", 3, 5, "vllm:none")):
        for request in range(2):
            rows.append({**keys, "drafter": drafter, "budget": budget, "request": request, "new_tokens": tokens,
                         "emitted": tokens, "steps": 2, "ttft_s": 0.1, "tpot_s": 0.05, "e2el_s": 0.3, "itl_s": [0.05],
                         "base_decode_s": 0.8})
        cell_rows.append({**keys, "drafter": drafter, "budget": budget, "wall_s": 1.0, "base_wall_s": 2.0,
                          "baseline": baseline})
    table = load_table(pd.DataFrame(rows), pd.DataFrame(cell_rows), {}, n_boot=10).set_index("drafter")
    assert table.loc["vllm:ngram", "tpot_speedup"] == pytest.approx(4.0)  # (0.8 / 4) / 0.05
    assert table.loc["vllm:none", "tpot_speedup"] == pytest.approx(2.0)  # (0.8 / 8) / 0.05, vs jfbench's AR
