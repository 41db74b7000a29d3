"""Device, dtype, thread and cache-folder choices shared by every command."""

from __future__ import annotations

import functools
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from jetflow_bench.core.errors import JfbenchError

if TYPE_CHECKING:  # torch loads on first use: `jfbench --help` and the path helpers must not pay for it
    import torch

DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")  # --dtype names = torch attribute names


def resolve_device(device: str | None) -> torch.device:
    """``None`` -> cuda when present, else cpu. A cuda request without a GPU is a user error."""
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise JfbenchError(f"--device {device!r} is not a device: use cpu, cuda or cuda:N") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise JfbenchError(f"--device {device!r} asked for a GPU but none is available: use --device cpu")
    return dev


def resolve_dtype(dtype: str | None, device: torch.device) -> torch.dtype:
    """``None`` -> float32 on CPU, bfloat16 on GPU."""
    import torch

    if dtype is None:
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    if dtype not in DTYPES:
        raise JfbenchError(f"--dtype {dtype!r} is not supported: use one of {', '.join(DTYPES)}")
    return getattr(torch, dtype)


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work so that a clock read measures it (no-op on CPU)."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def set_threads(threads: int | None) -> None:
    if threads is not None:
        import torch

        torch.set_num_threads(threads)


def cpu_cores(threads: int) -> tuple[int, ...]:
    """The ``threads`` lowest-numbered CPUs this process may run on: the cores an engine at
    ``--threads`` gets when it is pinned (`pin_cores`; vLLM's CPU build binds one OpenMP thread per
    core, so two engines at equal threads compare on the same cores, not merely as many)."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    if threads > len(allowed):
        raise JfbenchError(f"--threads {threads}: this process may run on only {len(allowed)} CPUs "
                           f"({core_list(allowed)}), and each thread is bound to a core of its own: lower --threads")
    return tuple(allowed[:threads])


def core_list(cores) -> str:
    """CPU ids as ranges, the syntax of taskset and of VLLM_CPU_OMP_THREADS_BIND: (0, 1, 2, 5) -> "0-2,5"."""
    ids, spans = sorted(cores), []
    for core in ids:
        if spans and core == spans[-1][1] + 1:
            spans[-1][1] = core
        else:
            spans.append([core, core])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


def pin_cores(cores: tuple[int, ...]) -> None:
    """Run this process (and the threads it starts from now on) on ``cores`` only; no-op where the
    OS cannot pin. Call it before torch starts its thread pool."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, cores)


# The variables that choose torch's CPU kernels, set to values that give the same float32 results on
# x86-64 CPUs of one vendor with AVX2 (ATen and oneDNN capped at AVX2, MKL in its SSE2 "compatible"
# branch): AVX2 and AVX-512 AMD CPUs agree under them, but an Intel Xeon still trained the CI
# reference's micro target and heads to other weights (cause not isolated). They act only if set
# before torch loads: `pin_portable_cpu_numerics` sets them (the CI reference's script and
# `jfbench train --portable-numerics` call it).
PORTABLE_CPU_NUMERICS: dict[str, str] = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2",
                                         "MKL_CBWR": "COMPATIBLE"}


def pin_portable_cpu_numerics() -> None:
    """Train and decode under `PORTABLE_CPU_NUMERICS`, so a seed gives the same weights on any x86-64
    CPU of the same vendor with AVX2 (MKL's compatible branch may be slower). Torch and MKL read the
    variables once, at their first kernels; once torch has loaded without them this refuses rather
    than risk the native kernels."""
    unset = {name: value for name, value in PORTABLE_CPU_NUMERICS.items() if os.environ.get(name) != value}
    if unset and "torch" in sys.modules:
        pairs = " ".join(f"{name}={value}" for name, value in PORTABLE_CPU_NUMERICS.items())
        raise JfbenchError(f"the portable CPU numerics must be set before torch loads, and it has: set {pairs} "
                           "in the environment before starting Python")
    os.environ.update(unset)


def cpu_numerics() -> dict[str, str | None]:
    """Which CPU kernels torch runs: the CPU's vendor, the vector ISA its ATen kernels use and the
    variables that cap oneDNN's and MKL's. The same seed trains to other weights under other kernels
    (AVX-512 vs AVX2 unpinned, Intel vs AMD even pinned), so a run records them and `check` relaxes
    its gate when a baseline's differ."""
    import torch

    return {"cpu_vendor": cpu_vendor(), "aten_capability": torch.backends.cpu.get_cpu_capability(),
            **{name: os.environ.get(name) for name in PORTABLE_CPU_NUMERICS}}


def numerics_difference(before: dict | None, after: dict | None) -> str | None:
    """What differs between two `cpu_numerics` records ("cpu_vendor AuthenticAMD → GenuineIntel"), or
    None. Only what both record is compared: older records lack some fields, or all."""
    if before is None or after is None:
        return None
    changed = [f"{k} {before[k]} → {after[k]}" for k in sorted(before.keys() & after.keys()) if before[k] != after[k]]
    return ", ".join(changed) or None


def native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (x86 AVX512-BF16 or AMX, Arm's bf16 feature).
    Elsewhere torch emulates bf16 matmuls, and a toy target's bf16-autocast training step ran ~13x
    slower than in fp32 (2-core AVX2 EPYC, deep preset: 117 against 1,554 tok/s), so autocast is skipped there."""
    flags = set((cpuinfo_field("flags") or cpuinfo_field("Features") or "").split())
    return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})


def cpu_vendor() -> str | None:
    """The CPU's vendor id (GenuineIntel, AuthenticAMD); None where unknown."""
    return cpuinfo_field("vendor_id")


def cpuinfo_field(name: str) -> str | None:
    """The first value of `name` in /proc/cpuinfo ("model name", "vendor_id"); None where absent."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith(name)), None)


def cache_dir() -> Path:
    """Where generated models, heads and data caches live (never inside the git checkout)."""
    root = os.environ.get("JFBENCH_CACHE")
    path = Path(root) if root else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "jfbench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def data_dir(explicit: Path | None = None) -> Path | None:
    """The benchmark data folder: ``--data-dir``, else ``JFBENCH_DATA_DIR``, else None."""
    if explicit is not None:
        return Path(explicit)  # library callers may pass a str
    env = os.environ.get("JFBENCH_DATA_DIR")
    return Path(env) if env else None


def available_memory_bytes(device: torch.device) -> int | None:
    """Memory a new allocation can still get: free device memory on CUDA; on CPU the kernel's
    MemAvailable, capped by the cgroup (container) limit minus its usage. None when unknown."""
    if device.type == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    known = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                known.append(int(line.split()[1]) * 1024)  # kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            known.append(int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text()))
    except (OSError, ValueError):
        pass
    return max(0, min(known)) if known else None


HUB_PROBE_S = 2.0  # seconds the one connection attempt to the model hub may take


def hub_offline() -> bool:
    """HF_HUB_OFFLINE (or HF_DATASETS_OFFLINE) is set; read at call time (not at import, as
    huggingface_hub does), so tests and users can set it late."""
    flags = (os.environ.get(var, "").lower() for var in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))
    return any(flag in {"1", "true", "yes", "on"} for flag in flags)


def hub_reachable() -> bool:
    """Whether the model hub can be asked at all: never with HF_HUB_OFFLINE, else one TCP connection
    attempt per process (no request, no retries), so a machine without network learns it in
    seconds instead of through a minute of download retries."""
    return not hub_offline() and _hub_answers()


@functools.cache
def _hub_answers() -> bool:
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=HUB_PROBE_S).close()
        return True
    except OSError:  # refused, unresolvable or timed out
        return False
