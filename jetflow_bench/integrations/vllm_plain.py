"""vLLM's plain decoding as the rival of `jfbench bench baseline --against vllm`.

One managed `vllm serve` (no speculative config) for the whole benchmark, its OpenMP threads bound
to the cores jfbench decodes on (`ServerConfig.cpus`). A timed batch sends its prompts at once as
token ids (one streamed request each, greedy, ``ignore_eos`` so that every request generates
exactly ``max_tokens``) and is timed on the client's clock from the batch's first streamed token
to the end of its last stream: the same span as jfbench's decode time. The HTTP round trip of
each token is inside that span, as it is for anyone who serves through vLLM's API.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from jetflow_bench.bench.baseline import Decode
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.integrations.vllm_client import RequestFailed, Sampling, complete_all
from jetflow_bench.integrations.vllm_server import ManagedServer, ServerConfig, http_get, served_model

# vLLM 0.32's worker keeps polling its input queue (sched_yield in a loop) for 1 s after its last
# step before it sleeps (`shm_broadcast`, busy_loop_s): on the core it shares with jfbench it would
# still compete with jfbench's side of the next pair.
SETTLE_S = 1.5


class VLLMPlain:
    """A `bench.baseline.Rival`: start it with ``with``; it stops the server on exit."""

    name = "vLLM"

    def __init__(self, vllm_bin: str, config: ServerConfig, log: Path) -> None:
        self.server = ManagedServer(vllm_bin, config, log)
        self.model, self.version = "", "?"

    def __enter__(self) -> VLLMPlain:
        self.server.start()
        try:
            self.model = served_model(self.server.url)["id"]
            status, body = http_get(f"{self.server.url}/version")
            self.version = json.loads(body).get("version", "?") if status == 200 else "?"
        except BaseException:
            self.server.stop()
            raise
        return self

    def __exit__(self, *_exc) -> None:
        self.server.stop()

    def decode(self, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> Decode:
        try:
            done = complete_all(self.server.url, self.model, prompts, Sampling(max_new_tokens, ignore_eos=True))
        except RequestFailed as err:
            self.server.check_alive(wait_s=10.0)
            raise JfbenchError(f"a vLLM request failed ({err}); see {self.server.log}") from None
        time.sleep(SETTLE_S)  # untimed: the worker goes idle before the next side runs on its cores
        return Decode(max(c.last for c in done) - min(c.first for c in done), [c.token_ids for c in done])

    def describe(self) -> str:
        env = " ".join(f"{k}={v}" for k, v in self.server.config.env().items())
        return (f"vLLM {self.version} plain decoding, managed `vllm serve` with {env}, timed on the streams "
                f"(first token to last stream end); log {self.server.log}")
