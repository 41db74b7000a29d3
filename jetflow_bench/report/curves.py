"""Held-out curves of trained heads: the acceptance proxy `jfbench train` measured every
``--eval-every`` steps, read back from each head's record, to show whether a head reached a
plateau and whether more training data still helps (two data sizes side by side)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.heads.checkpoint import read_json

COLUMNS = ["head", "step", "heldout_accept_len", "heldout_top1"]
SUMMARY_COLUMNS = ["head", "drafter", "prompts", "sequences", "decay", "seed", "steps_done", "stop_reason",
                   "last", "best", "best_step", "plateau_step"]


def head_record_path(path: Path) -> Path:
    """A head folder's config.json, or a record file itself (a published ``heads/NAME.config.json``)."""
    record = path / "config.json" if path.is_dir() else path
    if not record.is_file() and _in_training(path) is None:
        raise JfbenchError(f"{path}: no head record here: pass a folder written by `jfbench train` "
                           "(it holds config.json, or a checkpoint while it trains) or a head's .config.json file")
    return record


def _in_training(path: Path) -> Path | None:
    """The checkpoint of a head still in training (newer than its record, or it has none), else None."""
    from jetflow_bench.training.loop import latest_checkpoint

    checkpoint = latest_checkpoint(path) if path.is_dir() else None
    if checkpoint is None:
        return None
    record = path / "config.json"
    newer = not record.is_file() or (checkpoint / "state.pt").stat().st_mtime > record.stat().st_mtime
    return checkpoint if newer else None


def head_labels(paths: Sequence[Path]) -> list[str]:
    """Each head's name in tables: the shortest end of its path that tells it from the others
    (``seed-0`` alone, else ``2400/dflash/seed-0`` beside ``256/dflash/seed-0``); records lose
    their ``.config.json``."""
    records = [head_record_path(p).resolve() for p in paths]
    if len(set(records)) < len(records):
        raise JfbenchError(f"a head is named twice in {', '.join(map(str, paths))}: pass each head once")
    parts = [(r.parent if r.name == "config.json" else r.with_name(r.name.removesuffix(".config.json"))).parts
             for r in records]
    depth = [1] * len(parts)
    while True:
        labels = ["/".join(p[-d:]) for p, d in zip(parts, depth, strict=True)]
        clashing = {i for i, label in enumerate(labels) if labels.count(label) > 1}
        if not clashing:
            return labels
        depth = [d + (i in clashing) for i, d in enumerate(depth)]


def read_training(path: Path) -> dict[str, Any]:
    """The ``training`` part of a head's record, or of a head in training its checkpoint's curve (stop
    reason "in training", the recipe from a record an earlier stop left); an error naming the file
    when there is no held-out curve."""
    record = head_record_path(path)
    training = read_json(record, "pass a head trained by `jfbench train`").get("training") or {} if record.is_file() else {}
    checkpoint = _in_training(path)
    if checkpoint is not None:
        import torch

        state = torch.load(checkpoint / "state.pt", weights_only=False, map_location="cpu")
        training = {**training, "heldout": state.get("heldout") or [], "steps_done": state["step"],
                    "stop_reason": "in training"}
    if not training.get("heldout"):
        raise JfbenchError(f"{record} records no held-out curve: train the head with `jfbench train --heldout N` "
                           "(N > 0; the default holds 32 sequences out)")
    return training


def heldout_curves(paths: Sequence[Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(one row per head and evaluation: `COLUMNS`; one row per head: `SUMMARY_COLUMNS`)."""
    rows, summary = [], []
    for label, path in zip(head_labels(paths), paths, strict=True):
        training = read_training(path)
        config = training.get("recipe") or training.get("config") or {}
        curve = [(e["step"], e["accept_len"], (e.get("agreement") or [float("nan")])[0]) for e in training["heldout"]]
        rows += [{"head": label, "step": s, "heldout_accept_len": a, "heldout_top1": t} for s, a, t in curve]
        best = max(curve, key=lambda e: e[1])
        summary.append({"head": label, "drafter": config.get("drafter"), "prompts": config.get("prompts"),
                        "sequences": training.get("sequences"), "decay": config.get("decay"), "seed": config.get("seed"),
                        "steps_done": training.get("steps_done"), "stop_reason": training.get("stop_reason"),
                        "last": curve[-1][1], "best": best[1], "best_step": best[0],
                        "plateau_step": plateau_step(training["heldout"])})
    return pd.DataFrame(rows, columns=COLUMNS), pd.DataFrame(summary, columns=SUMMARY_COLUMNS)


def plateau_step(heldout: list[dict[str, Any]]) -> int | None:
    """The first evaluation at which the plateau test (`training.loop.plateaued`, the one
    ``--stop-on-plateau`` applies) finds the curve flat, or None: whether a head trained on a fixed
    schedule reached a plateau, and where, read by the rule the suite stops on."""
    from jetflow_bench.training.loop import plateaued

    return next((heldout[n - 1]["step"] for n in range(1, len(heldout) + 1) if plateaued(heldout[:n])), None)


def curves_figure(curves: pd.DataFrame) -> Figure:
    """The held-out accept length against the training step, one line per head."""
    figure = Figure(figsize=(7, 4), layout="constrained")
    ax = figure.subplots()
    for head, rows in curves.groupby("head", sort=False):
        ax.plot(rows["step"], rows["heldout_accept_len"], marker=".", label=head)
    ax.set_xlabel("training step")
    ax.set_ylabel("held-out accept length (proxy)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return figure
