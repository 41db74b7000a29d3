"""The run folder on disk: per-cell atomic parts, the combined tables, the manifest and the lock.

A cell's results become visible all at once: its two parquet parts are written to temporary
files and renamed into place, then its ``.json`` record — the commit marker — is renamed into
place last. A crash (even ``kill -9``) at any moment leaves either a finished cell or nothing
that counts; the next run with the same config skips finished cells and redoes the rest. The
combined tables at the top of the folder are always rebuilt whole from ``cells/`` (after finished
cells, and at the end of a run), so they never hold duplicate rows.

The lock is a `filelock.FileLock` (an ``flock``) on ``.lock``, and ``.lock.json`` names the
holder's pid and host for the message: the kernel drops the lock when its process dies, however it
dies, so a stale lock from a crashed sweep is simply taken over, and pid reuse cannot keep a dead
run's lock alive.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
from filelock import FileLock, Timeout

from jetflow_bench.core.arms import HEAD_RECORDS, head_record_file
from jetflow_bench.core.errors import JfbenchError, writable_folder
from jetflow_bench.measure.integrity import READ_ERRORS, cell_problems, reason
from jetflow_bench.report.loading import ADDED_KEYS, with_cell_keys
from jetflow_bench.sweep.grid import DrafterSpec
from jetflow_bench.sweep.tables import (
    CELL_COLUMNS,
    MARGINAL_COLUMNS,
    NODE_COLUMNS,
    PAIRING_COLUMNS,
    RANK_COLUMNS,
    REQUEST_COLUMNS,
    STEP_COLUMNS,
    concat,
    summary_table,
)

MANIFEST = "manifest.json"
LOCK = ".lock"
HOLDER = ".lock.json"  # who holds LOCK (pid, host, since), for the message a second writer gets
CELLS = "cells"
PARTIAL = "partial"  # a running cell's decoded prompt batches (`jetflow_bench.sweep.journal`)
OPTIONAL_PARTS = {"nodes": NODE_COLUMNS, "marginals": MARGINAL_COLUMNS, "ranks": RANK_COLUMNS}  # only some drafters have them
TABLES = ("steps.parquet", "requests.parquet", "cells.parquet", *(f"{name}.parquet" for name in OPTIONAL_PARTS),
          "summary.parquet", "summary.csv")
DERIVED = (*TABLES, "ablation.parquet", "ablation.csv")
Derived = Mapping[str, Callable[[pd.DataFrame], pd.DataFrame]]  # table name -> f(requests rows)
CellParts = tuple[pd.DataFrame, pd.DataFrame, dict[str, Any], dict[str, pd.DataFrame]]  # steps, requests, record, optional parts


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def atomic_write(path: Path, write: Callable[[Path], Any]) -> None:
    """``write(tmp)`` then rename over ``path``: readers see the old file or the new one, never half."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json(path: Path, data: dict[str, Any]) -> None:
    atomic_write(path, lambda tmp: tmp.write_text(json.dumps(data, indent=2, default=str) + "\n"))


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


class RunLock:
    """One writer per run folder; see the module docstring for why ``flock``."""

    def __init__(self, folder: Path) -> None:
        self.lock = FileLock(folder / LOCK)
        self.holder = folder / HOLDER

    def acquire(self) -> None:
        try:
            self.lock.acquire(blocking=False)
        except Timeout:
            holder = read_json(self.holder) or {}
            raise JfbenchError(
                f"{self.holder.parent} is in use by another sweep (pid {holder.get('pid', '?')} on "
                f"{holder.get('host', '?')} since {holder.get('since', '?')}): wait for it to finish "
                "or choose another --out"
            ) from None
        stale = read_json(self.holder)  # a holder that died without releasing left its record
        if stale and stale.get("pid"):
            print(
                f"note: taking over the stale lock of pid {stale['pid']} on {stale.get('host', '?')} "
                "(that sweep is gone)", file=sys.stderr,
            )
        write_json(self.holder, {"pid": os.getpid(), "host": socket.gethostname(), "since": now_iso()})

    def release(self) -> None:
        if self.lock.is_locked:
            self.holder.unlink(missing_ok=True)
            self.lock.release()


class RunStore:
    """Reads and writes one run folder (layout in `jetflow_bench.sweep`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.cells_dir = folder / CELLS
        self._parts: dict[str, tuple[pd.DataFrame, pd.DataFrame, dict[str, Any] | None]] = {}  # read once
        self._optional: dict[tuple[str, str], pd.DataFrame] = {}  # (cell id, optional part) -> rows

    @contextlib.contextmanager
    def locked(self) -> Iterator[RunStore]:
        writable_folder(self.folder, "--out")
        lock = RunLock(self.folder)
        lock.acquire()
        try:
            yield self
        finally:
            lock.release()

    # ------------------------------------------------------------------ manifest and config
    @property
    def manifest_path(self) -> Path:
        return self.folder / MANIFEST

    def manifest(self) -> dict[str, Any] | None:
        return read_json(self.manifest_path)

    def prepare(self, config_hash: str, force: bool, settings_hash: str | None = None) -> dict[str, Any] | None:
        """Check the folder may take a run of ``config_hash``; returns the manifest to resume, if any.

        A run whose settings match and only the grid differs (drafters, suites, budgets, batch
        sizes, repeats) is resumed: finished cells still in the grid are kept, the rest are run.
        A folder holding a run of another config is refused unless ``force``, which discards its
        results. A non-empty folder that holds no run is always refused: it may be anything. A
        damaged manifest next to ``cells/`` starts a new one; each cell still counts only if its
        own record matches this config (`finished`).
        """
        manifest = self.manifest()
        if manifest is None and self.manifest_path.exists() and self.cells_dir.is_dir():
            print(f"note: {self.manifest_path} is not valid JSON: writing a new one; finished cells of this "
                  "config are kept", file=sys.stderr)
            return None
        if manifest is None:
            if any(p.name not in (LOCK, HOLDER) for p in self.folder.iterdir()):
                raise JfbenchError(f"--out {self.folder} is not empty and holds no jfbench run: choose a new folder")
            return None
        if manifest.get("config_hash") != config_hash:
            if force:
                self.discard()
                return None
            if settings_hash is None or manifest.get("settings_hash") != settings_hash:
                raise JfbenchError(
                    f"--out {self.folder} holds a run of another config ({manifest.get('config_hash')}, this one is "
                    f"{config_hash}; a resume may change only drafters, suites, budgets, batch sizes and repeats): "
                    "choose another --out, or pass --force to discard those results"
                )
            print("note: the grid changed; finished cells that are still in it are kept", file=sys.stderr)
        leftovers = [*self.folder.glob(".*.tmp-*"), *self.cells_dir.glob(".*.tmp-*"), *self.folder.glob(f"{PARTIAL}/*/.*.tmp-*")]
        for leftover in leftovers:
            leftover.unlink(missing_ok=True)  # from a crashed writer
        return manifest

    def discard(self) -> None:
        shutil.rmtree(self.cells_dir, ignore_errors=True)
        shutil.rmtree(self.folder / PARTIAL, ignore_errors=True)
        shutil.rmtree(self.folder / HEAD_RECORDS, ignore_errors=True)
        for name in (*DERIVED, MANIFEST):
            (self.folder / name).unlink(missing_ok=True)

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        write_json(self.manifest_path, manifest)

    def keep_head_records(self, specs: Iterable[DrafterSpec]) -> None:
        """Copy each arm's head record (its checkpoint's config.json) into the run's ``heads/``, so the
        run still says how its heads were trained (claims' twin check, old-recipe labels) once the
        head folders are gone or the run is copied elsewhere."""
        for spec in specs:
            record = Path(spec.checkpoint) / "config.json" if spec.checkpoint else None
            if record is not None and record.is_file():
                (self.folder / HEAD_RECORDS).mkdir(exist_ok=True)
                shutil.copyfile(record, self.folder / HEAD_RECORDS / head_record_file(spec.name, spec.variant))

    # ------------------------------------------------------------------ cells
    def finished(self, config_hashes: dict[str, str], labels: Mapping[str, str] | None = None) -> set[str]:
        """Ids of cells whose record matches ``config_hashes[cell_id]`` and whose parts are sound.

        A finished cell whose record or parts are damaged (unreadable, columns missing, row counts
        other than its record's) is not finished: it is said in one line (``labels`` names cells
        for people) and its files are removed, so the run redoes it.
        """
        done = set()
        for cell_id, expected in config_hashes.items():
            record_path = self.cells_dir / f"{cell_id}.json"
            record = read_json(record_path)
            if record is None or record.get("config_hash") != expected:
                if record is None and record_path.exists():
                    self._redo(cell_id, f"{record_path} is not valid JSON", labels)
                continue
            problem = self.damage(cell_id, record)
            if problem:
                self._redo(cell_id, problem, labels)
            else:
                done.add(cell_id)
        return done

    def damage(self, cell_id: str, record: dict[str, Any]) -> str | None:
        """Why a finished cell's parts cannot be used, or None (then they are read and kept)."""
        # Cells recorded before in-session pairing lack its columns: still sound, with no speed-up.
        columns = {"steps": STEP_COLUMNS, "requests": [c for c in REQUEST_COLUMNS if c not in PAIRING_COLUMNS]}
        problem = cell_problems(self.cells_dir, cell_id, record, columns)
        if problem:
            return problem
        try:
            self._part(cell_id)  # a footer can be intact over a damaged body: read it all now
        except READ_ERRORS as err:
            self._parts.pop(cell_id, None)
            return f"a part of {self.cells_dir / cell_id} is unreadable ({reason(err)})"
        return None

    def _redo(self, cell_id: str, problem: str, labels: Mapping[str, str] | None) -> None:
        name = (labels or {}).get(cell_id, cell_id)
        print(f"note: cell {name} will run again: {problem}", file=sys.stderr)
        parts = ("json", "steps.parquet", "requests.parquet", *(f"{name}.parquet" for name in OPTIONAL_PARTS))
        for path in [self.cells_dir / f"{cell_id}.{part}" for part in parts]:
            path.unlink(missing_ok=True)  # the record first: it is what marks a cell finished
        self._parts.pop(cell_id, None)
        for name in OPTIONAL_PARTS:
            self._optional.pop((cell_id, name), None)

    def write_cell(
        self, cell_id: str, steps: pd.DataFrame, requests: pd.DataFrame, row: dict[str, Any],
        nodes: pd.DataFrame | None = None, marginals: pd.DataFrame | None = None, ranks: pd.DataFrame | None = None,
    ) -> None:
        """Write a cell's parts, then its record. ``nodes`` (the acceptance-calibration rows),
        ``marginals`` (the headroom replay's pass-1 children) and ``ranks`` (EAGLE's ranks of the
        emitted tokens) are optional parts: cells of drafters without log-prob scores, replayable
        trees or ranks, and older runs, have none."""
        self.cells_dir.mkdir(exist_ok=True)
        optional = {"nodes": nodes, "marginals": marginals, "ranks": ranks}
        parts = [("steps", steps), ("requests", requests),
                 *((name, frame) for name, frame in optional.items() if frame is not None and len(frame))]
        for name in OPTIONAL_PARTS:
            (self.cells_dir / f"{cell_id}.{name}.parquet").unlink(missing_ok=True)  # none stale from an earlier try
        for name, frame in parts:
            atomic_write(self.cells_dir / f"{cell_id}.{name}.parquet", lambda tmp, f=frame: f.to_parquet(tmp, index=False))
        write_json(self.cells_dir / f"{cell_id}.json", row)  # the commit marker, last
        self._parts[cell_id] = (steps, requests, row)
        for name, frame in optional.items():
            self._optional[cell_id, name] = frame if frame is not None else pd.DataFrame(columns=OPTIONAL_PARTS[name])

    def cell_part(self, cell_id: str, name: str) -> pd.DataFrame:
        """A finished cell's optional part ``name`` (`OPTIONAL_PARTS`); no rows when it has none."""
        if (cell_id, name) not in self._optional:
            path = self.cells_dir / f"{cell_id}.{name}.parquet"
            self._optional[cell_id, name] = with_cell_keys(pd.read_parquet(path)) if path.is_file() else pd.DataFrame(columns=OPTIONAL_PARTS[name])
        return self._optional[cell_id, name]

    def cell_parts(self, cell_id: str) -> CellParts:
        """A finished cell's parts as written: `write_cell`'s arguments, to store it in another folder."""
        optional = {name: self.cells_dir / f"{cell_id}.{name}.parquet" for name in OPTIONAL_PARTS}
        return (pd.read_parquet(self.cells_dir / f"{cell_id}.steps.parquet"),
                pd.read_parquet(self.cells_dir / f"{cell_id}.requests.parquet"),
                read_json(self.cells_dir / f"{cell_id}.json") or {},
                {name: pd.read_parquet(path) for name, path in optional.items() if path.is_file()})

    def cell_requests(self, cell_id: str) -> pd.DataFrame:
        return self._part(cell_id)[1]

    def cell_record(self, cell_id: str) -> dict[str, Any]:
        """A finished cell's ``.json`` record (its summary row, plus the session and command that ran it)."""
        return self._part(cell_id)[2] or {}

    def _part(self, cell_id: str) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any] | None]:
        if cell_id not in self._parts:
            record = read_json(self.cells_dir / f"{cell_id}.json")
            self._parts[cell_id] = (  # cells recorded before a cell key existed get its implied value
                with_cell_keys(pd.read_parquet(self.cells_dir / f"{cell_id}.steps.parquet")),
                with_cell_keys(pd.read_parquet(self.cells_dir / f"{cell_id}.requests.parquet")),
                None if record is None else {**ADDED_KEYS, **record},
            )
        return self._parts[cell_id]

    def load(self, cell_ids: list[str]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        """(steps, requests, cells) of the given finished cells, in the given order."""
        parts = [self._part(c) for c in cell_ids]
        return (
            concat([p[0] for p in parts], STEP_COLUMNS), concat([p[1] for p in parts], REQUEST_COLUMNS),
            pd.DataFrame([p[2] for p in parts if p[2] is not None], columns=CELL_COLUMNS),
        )

    def rebuild(self, cell_ids: list[str], n_boot: int, seed: int, derived: Derived | None = None) -> pd.DataFrame:
        """Rewrite the combined tables, the summary and any ``derived`` tables (name -> function of
        the requests rows, e.g. the ablation) from the finished cells; returns the summary."""
        steps, requests, cells = self.load(cell_ids)
        optional = {name: concat([self.cell_part(c, name) for c in cell_ids], columns) for name, columns in OPTIONAL_PARTS.items()}
        summary = summary_table(steps, requests, cells, n_boot, seed, optional["nodes"])
        for name, frame in (("steps", steps), ("requests", requests), ("cells", cells), *optional.items()):
            atomic_write(self.folder / f"{name}.parquet", lambda tmp, f=frame: f.to_parquet(tmp, index=False))
        tables = {"summary": summary, **{name: fn(requests) for name, fn in (derived or {}).items()}}
        for name, frame in tables.items():
            atomic_write(self.folder / f"{name}.parquet", lambda tmp, f=frame: f.to_parquet(tmp, index=False))
            atomic_write(self.folder / f"{name}.csv", lambda tmp, f=frame: f.to_csv(tmp, index=False))
        return summary
