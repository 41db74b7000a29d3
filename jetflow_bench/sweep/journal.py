"""A running cell's finished prompt batches, kept on disk so a killed cell resumes at its next batch.

A real target's cell can decode for an hour and more on a CPU; without this a crash, a Ctrl-C or
a session's time limit loses all of it, because a cell only counts once it is whole
(`jetflow_bench.sweep.store`). Each finished batch's raw engine output and its own timed wall
time are written (atomically, as JSON) to ``RUN/partial/<cell_id>/batch-NNNN.json``; the next
sweep of the same config loads them, decodes only the batches still missing and stores the cell
as usual, then removes the folder. Nothing here counts as a result: a cell's numbers exist only
once its record is written.

A batch is reused only if it was written for this cell's config hash and the same request ids;
anything else (another config, a file cut short, a record from an older code version) is named
in one line and decoded again. Each batch keeps the session that decoded it, so a cell's record
can say which of its batches were timed in an earlier session (its `resumed` key), and the
baseline timings of its own round (`DecodedBatch.paired`), so its speed-up never divides by a
baseline timed in another session.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from jetflow_bench.engine.loop import (
    BatchResult,
    MarginalBlock,
    NodeBlock,
    RankBlock,
    RequestResult,
    StepRecord,
)
from jetflow_bench.sweep.records import DecodedBatch
from jetflow_bench.sweep.store import PARTIAL, atomic_write


def _to_json(value: Any) -> Any:
    if hasattr(value, "item"):  # a numpy / torch scalar left in a record
        return value.item()
    raise TypeError(f"cannot keep {type(value).__name__} in a batch record")


def _batch_from(data: dict[str, Any]) -> DecodedBatch:
    raw = data["result"]
    result = BatchResult(
        requests=[RequestResult(**r) for r in raw["requests"]], steps=[StepRecord(**s) for s in raw["steps"]],
        wall_s=raw["wall_s"], nodes=[NodeBlock(**n) for n in raw["nodes"]], compile_s=raw["compile_s"],
        marginals=[MarginalBlock(**m) for m in raw.get("marginals", [])],  # batches journaled before they were recorded
        ranks=[RankBlock(**r) for r in raw.get("ranks", [])],
    )
    fields = {f.name for f in dataclasses.fields(DecodedBatch)} - {"result"}
    return DecodedBatch(result=result, **{name: data[name] for name in fields})


class CellJournal:
    """The ``partial/<cell_id>/`` folder of one cell under one config hash, written by one session."""

    def __init__(self, run_folder: Path, cell_id: str, config_hash: str, label: str, session: str) -> None:
        self.folder = run_folder / PARTIAL / cell_id
        self.config_hash, self.label, self.session = config_hash, label, session

    def load(self, batches: list[list[int]]) -> dict[int, DecodedBatch]:
        """The batches already decoded for this cell, by index; ``batches`` are the request ids per batch."""
        done: dict[int, DecodedBatch] = {}
        for path in sorted(self.folder.glob("batch-*.json")):
            try:
                data = json.loads(path.read_text())
                if data.get("config_hash") != self.config_hash:
                    problem = "it belongs to another config"
                elif "paired" not in data:
                    problem = "it predates in-session pairing (it keeps no baseline timed beside it)"
                else:
                    batch = _batch_from(data)
                    expected = batches[batch.index] if 0 <= batch.index < len(batches) else None
                    problem = None if batch.requests == expected else "its requests are not this batch's"
            except (OSError, ValueError, KeyError, TypeError) as err:
                problem = f"it is unreadable ({type(err).__name__}: {err})"
            if problem:
                print(f"note: {self.label}: {path} is decoded again: {problem}", file=sys.stderr)
                path.unlink(missing_ok=True)
            else:
                done[batch.index] = batch
        return done

    def save(self, batch: DecodedBatch) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"config_hash": self.config_hash, **dataclasses.asdict(batch)}, default=_to_json)
        atomic_write(self.folder / f"batch-{batch.index:04d}.json", lambda tmp: tmp.write_text(text))

    def clear(self) -> None:
        """Remove the folder once the cell is stored (and ``partial/`` when it is left empty)."""
        shutil.rmtree(self.folder, ignore_errors=True)
        with contextlib.suppress(OSError):  # other cells' batches are still there, or it is gone
            self.folder.parent.rmdir()
