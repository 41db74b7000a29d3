"""A vLLM OpenAI-compatible server: started and stopped by jfbench (managed) or the user's (external).

Managed: ``VLLM_BIN serve MODEL --host 127.0.0.1 --port P ...`` in its own process group, its
output in a log file of the run folder; ready when ``GET /health`` answers 200. A start-up that
exits, or a server that dies later, is a `JfbenchError` naming the cause (the log's last error
line) and the log file. External: the user's URL; nothing is started or stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.runtime import core_list

LOOPBACK = "127.0.0.1"
STARTUP_TIMEOUT_S = 900.0  # CPU start-up is 30-90 s idle; far more on a loaded machine
_ERROR_LINE = re.compile(r"\b(\w*(Error|Exception)|error)\b[:\s]", re.IGNORECASE)


@dataclass(frozen=True)
class ServerConfig:
    """What a managed `vllm serve` is started with; `args` renders it as command-line flags."""

    model: str  # path or hub id
    dtype: str  # float32, bfloat16, ...
    speculative: dict[str, Any] | None  # --speculative-config; None = plain decoding
    max_num_seqs: int  # >= the largest batch size (concurrency) of the run
    seed: int = 0
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    extra_args: tuple[str, ...] = field(default=())  # passed through verbatim
    cpus: tuple[int, ...] = ()  # the cores vLLM's CPU build binds its OpenMP threads to; () = its own choice

    def env(self) -> dict[str, str]:
        """The environment variables the server starts with on top of jfbench's (recorded in the run
        manifest). vLLM's CPU build runs one OpenMP thread per core listed in
        VLLM_CPU_OMP_THREADS_BIND, each pinned to its core; left unset, vLLM 0.32 takes every
        physical core of its NUMA node but one (kept for its scheduler), whatever jfbench's --threads."""
        env = {"VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}  # GiB
        if self.cpus:
            env |= {"VLLM_CPU_OMP_THREADS_BIND": core_list(self.cpus), "OMP_NUM_THREADS": str(len(self.cpus))}
        return env

    def args(self) -> list[str]:
        args = [
            "--dtype", self.dtype, "--seed", str(self.seed), "--max-num-seqs", str(self.max_num_seqs),
            # Model defaults (generation_config.json) could add penalties; the suite's settings rule.
            "--generation-config", "vllm",
            # jfbench's engine has no prefix cache, and warm-up repeats the first batch's prompts.
            "--no-enable-prefix-caching",
            "--tensor-parallel-size", str(self.tensor_parallel_size),
            "--pipeline-parallel-size", str(self.pipeline_parallel_size),
        ]
        if self.speculative is not None:
            args += ["--speculative-config", json.dumps(self.speculative, sort_keys=True)]
        return [*args, *self.extra_args]


def http_get(url: str, timeout: float = 10.0) -> tuple[int, str]:
    """(status, body); raises `httpx.TransportError` when nothing answers."""
    response = httpx.get(url, timeout=timeout)
    return response.status_code, response.text


def served_model(url: str) -> dict[str, Any]:
    """The one model a server at ``url`` serves (its `/v1/models` entry: id, root)."""
    status, body = http_get(f"{url}/v1/models")
    if status != 200:
        raise JfbenchError(f"{url}/v1/models answered HTTP {status}: is this a vLLM OpenAI-compatible server?")
    models = json.loads(body).get("data", [])
    if len(models) != 1:
        raise JfbenchError(f"{url} serves {len(models)} models; jfbench benchmarks a server with exactly one")
    return models[0]


def port_free(port: int, host: str = LOOPBACK) -> bool:
    """Whether a server could listen on ``port`` now (SO_REUSEADDR, as uvicorn binds: connections
    of a stopped server lingering in TIME_WAIT do not make a port taken)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = LOOPBACK) -> int:
    """A port nothing listens on now (the OS picks it; a race with another process stays possible)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def log_cause(log: Path, lines: int = 200) -> str:
    """The last error-looking line of a server log (what to show the user), or a generic phrase."""
    try:
        tail = log.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return "no log was written"
    if any("address already in use" in line.lower() for line in tail):
        return "its port is already in use"
    for line in reversed(tail):
        if _ERROR_LINE.search(line):
            return line.strip()[-300:]
    return tail[-1].strip()[-300:] if tail else "the log is empty"


class ManagedServer:
    """One `vllm serve` process for one `ServerConfig`."""

    def __init__(self, vllm_bin: str, config: ServerConfig, log: Path, port: int | None = None,
                 startup_timeout_s: float = STARTUP_TIMEOUT_S) -> None:  # fmt: skip
        self.vllm_bin, self.config, self.log = vllm_bin, config, log
        self.port = port
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def start(self) -> None:
        """Start the server and wait until it is healthy; JfbenchError when it cannot come up."""
        if self.port is None:
            self.port = free_port()
        elif not port_free(self.port):
            raise JfbenchError(f"--vllm-port {self.port}: port {self.port} on {LOOPBACK} is already in use; "
                               "free it or leave --vllm-port out (a free port is chosen)")
        command = [self.vllm_bin, "serve", self.config.model, "--host", LOOPBACK, "--port", str(self.port),
                   *self.config.args()]
        # Unbuffered: vLLM logs to stdout, and a crash must not lose the lines that say why.
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.config.env()}
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            settings = " ".join(f"{k}={v}" for k, v in self.config.env().items())
            out.write(f"$ {settings} {' '.join(command)}\n".encode())
            out.flush()
            try:
                self.process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                                stdin=subprocess.DEVNULL, start_new_session=True,
                                                preexec_fn=_die_with_parent)
            except OSError as err:
                raise JfbenchError(f"--vllm-bin {self.vllm_bin}: cannot run it ({err.strerror}); "
                                   "install vLLM with `jfbench vllm setup` or point --vllm-bin at its `vllm`") from None
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            code = self.process.poll() if self.process else None
            if code is not None:
                raise JfbenchError(f"the vLLM server exited during start-up (code {code}): "
                                   f"{log_cause(self.log)}; see {self.log}")
            with contextlib.suppress(httpx.TransportError):  # not listening yet
                if http_get(f"{self.url}/health", timeout=5)[0] == 200:
                    return
            time.sleep(1.0)
        self.stop()
        raise JfbenchError(f"the vLLM server did not become healthy within {self.startup_timeout_s:.0f} s; "
                           f"see {self.log}")

    def check_alive(self, wait_s: float = 0.0) -> None:
        """Raise a JfbenchError naming the exit code and log when the server process has died
        (waiting up to ``wait_s`` for a dying one to exit)."""
        if self.process is None:
            return
        try:
            code = self.process.wait(wait_s) if wait_s else self.process.poll()
        except subprocess.TimeoutExpired:
            code = None
        if code is not None:
            raise JfbenchError(f"the vLLM server died (exit code {code}): {log_cause(self.log)}; see {self.log}")

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM the server's process group, SIGKILL it after ``grace_s``."""
        if self.process is None:
            return
        process, self.process = self.process, None
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # workers left in the group (engine core)


def _die_with_parent() -> None:
    """In the server's process, before exec: SIGTERM it when jfbench dies, however jfbench dies
    (Linux ``PR_SET_PDEATHSIG``), so that a killed sweep leaves no server behind."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


def group_peak_rss(pgid: int) -> int:
    """Σ peak resident memory (VmHWM) of the live processes in process group ``pgid`` (Linux; else 0)."""
    total = 0
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:  # fields after "(comm)": state, ppid, pgrp, ...
                continue
            for line in (proc / "status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) * 1024  # kB
        except (OSError, IndexError, ValueError):
            continue
    return total
