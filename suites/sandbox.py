"""Run generated code against its tests in a separate, limited process.

Model output is untrusted: it may loop forever, allocate without bound, write anywhere or open
sockets. Each program therefore runs in its own Python process (never in the suite's process), in a
throw-away working directory, with a wall-clock timeout (the whole process group is killed), an
address-space limit (``RLIMIT_AS``), a CPU-time backstop, a file-size limit, an audit hook that
refuses writes outside that directory, new processes and network use (see ``_sandbox_child``), and,
where ``unshare`` can create a user + network namespace, no network interface at all.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from suites._sandbox_child import MEMORY_ERROR_EXIT

CHILD_SCRIPT = Path(__file__).with_name("_sandbox_child.py")
DEFAULT_TIMEOUT_S = 10.0  # wall clock per program; generous because 2-core CI machines are shared
DEFAULT_MEMORY_MB = 1024  # address space, not resident memory: Python itself maps ~30 MB
OUTPUT_TAIL_CHARS = 2000  # how much of a program's output an ExecResult keeps for diagnosis


@dataclass(frozen=True)
class ExecResult:
    """How one program ended. ``status``: passed, failed, timeout, memory or killed (by a signal)."""

    status: str
    detail: str = ""  # last lines of the program's stdout/stderr, or why it was stopped

    @property
    def passed(self) -> bool:
        return self.status == "passed"


@cache
def network_namespace_prefix() -> tuple[str, ...]:
    """``("/usr/bin/unshare", "-rn")`` when that works here, else ``()`` (namespaces may be disabled)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    try:
        probe = subprocess.run([unshare, "-rn", "true"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return ()
    return (unshare, "-rn") if probe.returncode == 0 else ()


def _command(timeout_s: float, memory_mb: int) -> list[str]:
    # -I: ignore PYTHON* variables and the user site; -B: write no bytecode next to anything.
    child = [sys.executable, "-I", "-B", str(CHILD_SCRIPT), str(timeout_s), str(memory_mb)]
    return [*network_namespace_prefix(), *child]


def _child_env(workdir: str) -> dict[str, str]:
    """A minimal environment: no tokens or proxies leak in, numeric libraries stay single-threaded."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _tail(path: Path) -> str:
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - OUTPUT_TAIL_CHARS))
        return f.read().decode("utf-8", "replace")


def run_program(
    source: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, memory_mb: int = DEFAULT_MEMORY_MB
) -> ExecResult:
    """Run ``source`` (a program with its tests as asserts) and say whether it ran to its end."""
    nonce = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="jfbench-sandbox-", ignore_cleanup_errors=True) as workdir:
        output_path = Path(workdir) / "output.txt"
        with output_path.open("wb") as output:
            proc = subprocess.Popen(
                _command(timeout_s, memory_mb),
                cwd=workdir,
                env=_child_env(workdir),
                stdin=subprocess.PIPE,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so a timeout kills everything it left
            )
            try:
                proc.communicate(f"{nonce}\n{source}".encode(), timeout=timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return ExecResult("timeout", f"stopped after {timeout_s:g} s")
        text = _tail(output_path)
    if proc.returncode == 0 and nonce in text:
        return ExecResult("passed")
    detail = text.replace(nonce, "").strip() or f"exit code {proc.returncode} before its tests finished"
    if proc.returncode == MEMORY_ERROR_EXIT:
        return ExecResult("memory", detail)
    if proc.returncode < 0:
        return ExecResult("killed", f"signal {-proc.returncode}: {detail}")
    return ExecResult("failed", detail)


def run_programs(
    sources: Sequence[str],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = DEFAULT_MEMORY_MB,
    workers: int | None = None,
) -> list[ExecResult]:
    """``run_program`` over many programs, a few child processes at a time; results in input order."""
    workers = workers or min(4, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda s: run_program(s, timeout_s=timeout_s, memory_mb=memory_mb), sources))
