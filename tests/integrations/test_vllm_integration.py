"""`--engine vllm` end to end on a real vLLM server on 127.0.0.1 (slow: each start-up is minutes on 2 cores).

Start-ups are kept to three: the managed sweep's own (vllm:ngram), one plain server shared by the
external-mode tests (module fixture), and one that fails (bad model path). Servers run with
--enforce-eager: it skips the minute-long torch.compile warm-up and changes no token.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import httpx
import pandas as pd
import pytest

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.integrations.vllm_server import ManagedServer, ServerConfig, http_get, port_free
from jetflow_bench.integrations.vllm_setup import default_bin
from tests.helpers.data_dirs import benchmark_data_dir

VLLM_BIN = default_bin()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(VLLM_BIN is None, reason="vLLM is not installed (run `jfbench vllm setup`)"),
]
EAGER = ("--enforce-eager",)
GRID = ["--suites", "gsm8k", "--limit", "4", "--max-new-tokens", "48", "--repeats", "1", "--batch-sizes", "2",
        "--no-progress"]


@pytest.fixture(scope="module")
def plain_server(micro_target: Path, tmp_path_factory: pytest.TempPathFactory):
    """One plain-decoding vLLM server for the external-mode tests."""
    log = tmp_path_factory.mktemp("plain-server") / "server.log"
    config = ServerConfig(str(micro_target), "float32", None, max_num_seqs=2, extra_args=EAGER)
    server = ManagedServer(VLLM_BIN, config, log)
    server.start()
    yield server
    server.stop()


def _requests(run: Path, drafter: str) -> pd.DataFrame:
    requests = pd.read_parquet(run / "requests.parquet")
    return requests[requests["drafter"] == drafter]


def _summary(run: Path, drafter: str) -> pd.DataFrame:
    summary = pd.read_parquet(run / "summary.parquet")
    return summary[summary["drafter"] == drafter]


def test_managed_ngram_is_lossless_with_valid_tau_and_keeps_its_log(cli, micro_target, tmp_path):
    # Bugs: prompts sent as text (other ids), vLLM's tokens past the stop kept, counters read from
    # the wrong series, τ per draft instead of per step, the server left running, no log.
    run = tmp_path / "run"
    code, _, err = cli("sweep", "--engine", "vllm", "--target", str(micro_target), "--drafters", "vllm:ngram",
                       "--budgets", "5", "--vllm-args", " ".join(EAGER), "--out", str(run),
                       "--data-dir", str(benchmark_data_dir()), *GRID)
    assert code == 0, err
    requests = _requests(run, "vllm:ngram")
    assert len(requests) == 4 and requests["lossless"].all()
    ar = _requests(run, "ar").set_index("request")["output_ids"]
    for _, row in requests.iterrows():
        assert list(row["output_ids"]) == list(ar[row["request"]])
    (cell,) = _summary(run, "vllm:ngram").to_dict("records")
    assert cell["engine"].startswith("vllm ") and cell["accepted"] > 0  # drafts were accepted
    assert 1 < cell["tau"] <= 5 and 0 < cell["alpha"] <= 1
    assert cell["n_steps"] == requests["steps"].sum()
    assert cell["accepted"] + cell["n_steps"] == (requests["new_tokens"] - 1).sum()  # every token accounted for
    (log,) = (run / "vllm").glob("*.log")
    text = log.read_text()
    assert '"num_speculative_tokens": 4' in text and "--enforce-eager" in text
    port = int(re.search(r"--port (\d+)", text).group(1))
    with pytest.raises(httpx.TransportError):  # stopped at the end: nothing answers there
        http_get(f"http://127.0.0.1:{port}/health", timeout=5)
    assert port_free(port)


def test_external_plain_server_matches_jfbench_ar(cli, micro_target, tmp_path, plain_server):
    # Bug: external mode starts its own server, or reads another server's model.
    run = tmp_path / "run"
    code, _, err = cli("sweep", "--engine", "vllm", "--vllm-url", plain_server.url, "--target", str(micro_target),
                       "--drafters", "vllm:none", "--budgets", "5", "--out", str(run),
                       "--data-dir", str(benchmark_data_dir()), *GRID)
    assert code == 0, err
    assert not (run / "vllm").exists()
    requests = _requests(run, "vllm:none")
    assert len(requests) == 4 and requests["lossless"].all()
    (cell,) = _summary(run, "vllm:none").to_dict("records")
    assert cell["tau"] == 1 and cell["accepted"] == 0 and math.isnan(cell["alpha"])
    assert cell["tokens_per_s"] > 0 and cell["ttft_s"] > 0


def test_external_server_of_another_config_is_refused(cli, micro_target, tmp_path, plain_server):
    # Bug: an ngram cell measured on a plain server and reported as ngram.
    code, _, err = cli("sweep", "--engine", "vllm", "--vllm-url", plain_server.url, "--target", str(micro_target),
                       "--drafters", "vllm:ngram", "--budgets", "5", "--out", str(tmp_path / "run"),
                       "--data-dir", str(benchmark_data_dir()), *GRID)
    assert code == 2
    assert "serves plain decoding" in err and "vllm:ngram needs method ngram" in err


def test_server_with_a_bad_model_path_fails_naming_cause_and_log(tmp_path):
    # Bug: a failed start-up waited on until the timeout, or reported without the log.
    log = tmp_path / "bad.log"
    server = ManagedServer(VLLM_BIN, ServerConfig(str(tmp_path / "no-such-model"), "float32", None, 1), log)
    with pytest.raises(JfbenchError) as err:
        server.start()
    message = str(err.value)
    assert "exited during start-up" in message and str(log) in message
