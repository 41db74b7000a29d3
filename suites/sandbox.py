"""Run generated code against its tests so that the program cannot fake its own pass.

Design: two processes per program. The *program process* (`_sandbox_child`) executes the
untrusted code; the *judge* (`_sandbox_judge`) executes the tests — code from the benchmark's
data, never from the model — with the program's top-level names bound to stand-ins that call into
the program process over two pipes. The verdict is the judge's, written to a pipe that only the
judge and this process hold; the program process never has it, and nothing it prints, exits with
or writes counts. Values cross as plain data rebuilt from built-in types (`_sandbox_wire`), so a
test compares real ints, lists and strings, never an object with the program's own ``__eq__``.

Threat model. The program is hostile Python: it may read any frame, ``gc.get_objects()``,
``/proc/self``; exit with status 0 at any point; patch ``builtins``, ``AssertionError`` or its own
process's sandbox code; write a forged verdict to every descriptor it has; loop forever; allocate
without bound; try to write, delete or rename files elsewhere, start processes, signal its parent
or open sockets. None of that can make a test pass, because the tests, their namespace and the
verdict's pipe live in the judge, a separate process that makes itself non-dumpable (a program of
the same user cannot read its memory or descriptors through ``/proc`` or ``ptrace``). Containment
— so the program leaves nothing behind — is layered in the program process: a throw-away working
directory; a wall-clock timeout (both process groups are killed); ``RLIMIT_AS``, ``RLIMIT_CPU``,
``RLIMIT_FSIZE``; an audit hook refusing writes outside the directory, other processes' ``/proc``
entries, new processes, signals, sockets and ``ctypes``; and, where ``unshare -rn`` works, a user +
network namespace with no network interface (runs without one say so once, see `announce`).

Out of scope (this is a benchmark's guard, not a jail):
- native code: a C extension already installed, or a way into ``ctypes``/libc past the hook. As
  root, such code can do anything root can (write any file, ptrace this process); as another user,
  what that user can. A hostile model is contained then only by the namespace and the limits.
- Python that disarms the audit hook's own state (its closure, via ``gc``) before acting: the
  verdict stays sound (it never depended on the hook), containment falls back to the above.
- reading files: the program may read anything its user can, including the benchmark's data files
  (and so a suite's tests); hard-coding the answers a test expects is a pass here.
- tests that need the program's objects by value: results cross as plain data (arguments are
  copies, so in-place changes to them are not seen; other objects cross as stand-ins compared by
  identity); a test relying on a custom ``__eq__`` of the program's fails.
- kernel exploits and side channels (timing).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import BinaryIO

from suites._sandbox_child import MEMORY_ERROR_EXIT

CHILD_SCRIPT = Path(__file__).with_name("_sandbox_child.py")
JUDGE_SCRIPT = Path(__file__).with_name("_sandbox_judge.py")
DEFAULT_TIMEOUT_S = 10.0  # wall clock per program; generous because 2-core CI machines are shared
DEFAULT_MEMORY_MB = 1024  # address space, not resident memory: Python itself maps ~30 MB
OUTPUT_TAIL_CHARS = 2000  # how much of a program's output an ExecResult keeps for diagnosis
NO_NAMESPACE_NOTE = (
    "note: generated code runs without a network namespace here (`unshare -rn` is not available); "
    "only the sandbox's audit hook refuses its network use"
)


@dataclass(frozen=True)
class ExecResult:
    """How one program ended. ``status``: passed, failed, timeout, memory or killed (by a signal)."""

    status: str
    detail: str = ""  # last lines of the program's output and why it failed or was stopped

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


def isolation() -> dict[str, object]:
    """What a run's manifest records about how generated code was isolated."""
    namespace = bool(network_namespace_prefix())
    return {"network_namespace": namespace, "note": None if namespace else NO_NAMESPACE_NOTE}


_announced = False


def announce() -> None:
    """Say once per process, on stderr, that generated code runs without a network namespace."""
    global _announced
    if not _announced and not network_namespace_prefix():
        print(NO_NAMESPACE_NOTE, file=sys.stderr)
    _announced = True


def max_concurrency() -> int:
    """The cores this process may run on: never more sandboxes at once than that."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _env(home: str) -> dict[str, str]:
    """A minimal environment: no tokens or proxies leak in, numeric libraries stay single-threaded."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    }  # fmt: skip


def _tail(path: Path) -> str:
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - OUTPUT_TAIL_CHARS))
        return f.read().decode("utf-8", "replace").strip()


def _read_verdict(fd: int, deadline: float) -> dict | None:
    """The judge's JSON verdict from ``fd``, or None if the deadline passed first."""
    data, poll = b"", select.poll()  # poll, not select: a busy process may hold descriptors past 1024
    poll.register(fd, select.POLLIN)
    while (left := deadline - time.monotonic()) > 0:
        if not poll.poll(left * 1000):
            break
        chunk = os.read(fd, 65536)
        if not chunk:  # the judge closed it: a verdict, or nothing if it died
            try:
                verdict = json.loads(data)
            except ValueError:
                verdict = {"status": "failed", "detail": "the judge process ended without a verdict"}
            return verdict if isinstance(verdict, dict) else {"status": "failed", "detail": "bad verdict"}
        data += chunk
    return None


def _stop(proc: subprocess.Popen) -> None:
    """Kill ``proc``'s whole process group (it leads one) and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _spawn(workdir: str, output: BinaryIO, timeout_s: float, memory_mb: int, procs: list[subprocess.Popen]) -> int:
    """Start the program process and the judge (appended to ``procs``); returns the verdict pipe's read end.

    Pipes: judge -> program (requests), program -> judge (replies), judge -> here (the verdict).
    Each process gets only its own ends (``pass_fds``); this process keeps only the verdict's.
    """
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    result_r, result_w = os.pipe()
    try:
        child_cmd = [*network_namespace_prefix(), sys.executable, "-I", "-B", str(CHILD_SCRIPT), "program.py",
                     str(timeout_s), str(memory_mb), str(requests_r), str(replies_w)]  # fmt: skip
        procs.append(subprocess.Popen(
            child_cmd, cwd=workdir, env=_env(workdir), stdin=subprocess.DEVNULL, stdout=output,
            stderr=subprocess.STDOUT, pass_fds=(requests_r, replies_w), start_new_session=True,
        ))  # fmt: skip
        judge_cmd = [sys.executable, "-I", "-B", str(JUDGE_SCRIPT), str(requests_w), str(replies_r), str(result_w)]
        procs.append(subprocess.Popen(
            judge_cmd, cwd="/", env=_env("/"), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=output, pass_fds=(requests_w, replies_r, result_w), start_new_session=True,
        ))  # fmt: skip
    except BaseException:
        os.close(result_r)
        raise
    finally:
        for fd in (requests_r, requests_w, replies_r, replies_w, result_w):
            os.close(fd)
    return result_r


def run_program(
    program: str, tests: str = "", *, timeout_s: float = DEFAULT_TIMEOUT_S, memory_mb: int = DEFAULT_MEMORY_MB
) -> ExecResult:
    """Run ``program``, then ``tests`` against its names in the judge; passed = the tests ran to their end.

    Asserts inside ``program`` itself count only as far as the program fails by them: a program
    can always pretend to have finished, so the checks that decide a pass belong in ``tests``.
    """
    announce()
    deadline = time.monotonic() + timeout_s
    with tempfile.TemporaryDirectory(prefix="jfbench-sandbox-", ignore_cleanup_errors=True) as workdir:
        (Path(workdir) / "program.py").write_text(program, encoding="utf-8")
        output_path = Path(workdir) / "output.txt"
        procs: list[subprocess.Popen] = []
        try:
            with output_path.open("wb") as output:
                result_r = _spawn(workdir, output, timeout_s, memory_mb, procs)
            try:
                child, judge = procs
                with contextlib.suppress(BrokenPipeError):
                    judge.stdin.write(tests.encode())  # type: ignore[union-attr]
                    judge.stdin.close()  # type: ignore[union-attr]
                verdict = _read_verdict(result_r, deadline)
            finally:
                os.close(result_r)
        finally:
            for proc in procs:
                _stop(proc)
        output_text = _tail(output_path)
    if verdict is None:
        return ExecResult("timeout", f"stopped after {timeout_s:g} s")
    return _result(verdict, child.returncode, output_text)


def _result(verdict: dict, child_exit: int, output: str) -> ExecResult:
    status, why = str(verdict.get("status")), str(verdict.get("detail", ""))
    if status == "lost":  # the program's process quit answering: how it ended says more
        if child_exit == MEMORY_ERROR_EXIT:
            status = "memory"
        elif child_exit < 0 and child_exit != -signal.SIGKILL:  # SIGKILL: ours, after the verdict
            status, why = "killed", f"signal {-child_exit}: {why}"
        else:
            status = "failed"
    detail = "\n".join(part for part in (output, why) if part)
    return ExecResult(status if status in ("passed", "memory", "killed") else "failed", detail)


def run_programs(
    items: Sequence[tuple[str, str]],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = DEFAULT_MEMORY_MB,
    workers: int | None = None,
) -> list[ExecResult]:
    """`run_program` over many (program, tests) pairs; results in input order.

    At most ``workers`` run at once, and never more than the cores this process may use (each
    sandbox is two processes, one of them busy at a time).
    """
    workers = min(workers or max_concurrency(), max_concurrency())
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda it: run_program(*it, timeout_s=timeout_s, memory_mb=memory_mb), items))
