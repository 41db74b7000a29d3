"""`ensure_head`: a trained head for (target, drafter, recipe), trained once and then reused.

Heads live in ``<cache_dir()>/heads/<drafter>-<hash>/``, the hash covering the target's weights
fingerprint, the full `TrainConfig` and the device type and dtype. The ablation runner calls this
for variant heads (e.g. ``head="bidirectional"``, ``loss="rkl"``) when it is given no checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from filelock import FileLock

from jetflow_bench.core import runtime
from jetflow_bench.core.fingerprint import model_fingerprint
from jetflow_bench.training.config import TrainConfig, target_depth, train_config
from jetflow_bench.training.loop import finished, train_drafter

# About a minute per head on 2 cores for the micro target: enough for drafts to be accepted. The
# tests and the CI reference run (results/baselines/ci) share it, so CI trains each head once.
QUICK_RECIPE: dict[str, Any] = {
    "steps": 40, "prompts": 96, "max_new_tokens": 96, "seq_len": 160, "batch_size": 4, "anchors": 8, "warmup": 5,
}


def head_path(target_dir: str | Path, config: TrainConfig, device: str | None = None, dtype: str | None = None) -> Path:
    """Where `ensure_head` keeps the head for these arguments (it may not exist yet)."""
    dev = runtime.resolve_device(device)
    precision = runtime.resolve_dtype(dtype, dev)
    key = config.key(f"{model_fingerprint(target_dir)}|{dev.type}|{precision}")
    return runtime.cache_dir() / "heads" / f"{config.drafter}-{key}"


def ensure_head(
    target_dir: str | Path,
    drafter: str,
    *,
    data_dir: Path | None = None,
    device: str | None = None,
    dtype: str | None = None,
    threads: int | None = None,
    show_progress: bool = True,
    **train_opts: Any,
) -> Path:
    """Path of a finished head for ``drafter`` on ``target_dir`` trained with ``train_opts``
    (flat recipe fields, see `train_config`), training it first when the cache lacks it."""
    config = train_config(drafter, **train_opts).for_target(target_depth(target_dir))
    path = head_path(target_dir, config, device, dtype)
    if finished(path, config):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path.parent / f".{path.name}.lock"):  # one trainer per head; a waiting caller then finds it finished
        return train_drafter(
            target_dir, path, config, data_dir=data_dir, device=device, dtype=dtype, threads=threads,
            show_progress=show_progress,
        )
