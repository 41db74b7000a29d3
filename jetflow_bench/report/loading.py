"""Reading run folders (the output of `jfbench sweep` / `ablate`) for plots, reports and checks.

A run folder holds `summary.parquet` (or `summary.csv`), one row per cell, and usually
`manifest.json`, `steps.parquet`, `requests.parquet` and `ablation.parquet`/`.csv`. Only the
summary is required: everything downstream is derived from it, and the raw tables are read lazily
because they can be large. A folder that is not a run is a user error naming the folder and the fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from jetflow_bench.core.arms import AR_ARM, DEFAULT_VARIANT
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.measure.integrity import READ_ERRORS, reason, warn, warn_damaged_cells
from jetflow_bench.report.load import load_table

# The columns that identify one cell; the AR baseline has drafter AR_ARM, budget 1, variant "default".
# Equal to `jetflow_bench.sweep.grid.CELL_KEYS` (tested); repeated so reading results never imports torch.
CELL_KEYS: tuple[str, ...] = ("suite", "drafter", "variant", "budget", "batch_size", "repeat", "temperature", "load")
ADDED_KEYS = {"temperature": 0.0, "load": ""}  # cell keys newer than some recorded runs, with the value they implied (load "": batches)
# What reports say about losslessness at temperature > 0, where it is a distributional property
# checked by the test suite rather than a per-request token comparison.
SAMPLED_LOSSLESS = "distribution-preserving (tested)"
SPEEDUP = "speedup_decode_micro"  # the headline speed-up: decode-only, time-weighted (docs/methodology.md)
# A cell record's `pairing`: timed in rounds beside its baseline and an A/A copy (the speed-up
# divides by that baseline), or in a `--tau-only` run (no baseline timed, no speed-up claimed).
INTERLEAVED, TAU_ONLY = "interleaved", "tau-only"
NO_SPEEDUP = {TAU_ONLY: "a τ-only run times no baseline", None: "its baseline was not timed beside it in its session"}


REBUILD = "re-run the sweep (the same command) to rebuild the tables from cells/"


def _read_table(folder: Path, stem: str) -> tuple[pd.DataFrame | None, list[str]]:
    """(`stem`.parquet, else `stem`.csv, else None; why each damaged one of them was passed over)."""
    problems = []
    for path, read in ((folder / f"{stem}.parquet", pd.read_parquet), (folder / f"{stem}.csv", pd.read_csv)):
        if path.is_file():
            try:
                return read(path), problems
            except READ_ERRORS as err:
                problems.append(f"{path} is unreadable ({reason(err)})")
                warn(f"{problems[-1]}; going on without it")
    return None, problems


def with_cell_keys(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the `ADDED_KEYS` a run recorded before they existed (greedy runs: temperature 0),
    and the no-load level "" where a CSV read it back as empty (NaN)."""
    missing = {k: v for k, v in ADDED_KEYS.items() if k not in frame.columns}
    frame = frame.assign(**missing) if missing else frame
    if frame["load"].isna().any():
        frame = frame.assign(load=frame["load"].astype(object).fillna(""))
    return frame


def paired_only(summary: pd.DataFrame) -> pd.DataFrame:
    """``summary`` with no speed-up for a cell whose baseline was not timed beside it in its session.

    Runs recorded before in-session pairing paired each arm with a baseline cell that may have been
    timed in another session, under another load; τ-only runs time no baseline. Their speed-up
    columns become NaN and `speedup_note` says why ("" where the speed-up stands), so that `show`,
    `report`, `check` and `project` print none for them.
    """
    recorded = summary["pairing"].tolist() if "pairing" in summary else [None] * len(summary)
    pairing = [p if p in (INTERLEAVED, TAU_ONLY) else None for p in recorded]
    unpaired = pd.Series([p != INTERLEAVED for p in pairing], index=summary.index)
    speedups = [c for c in summary.columns if c.startswith("speedup_") and c != "speedup_note"]
    out = summary.assign(pairing=pd.Series(pairing, index=summary.index),
                         speedup_note=[NO_SPEEDUP[p] if p != INTERLEAVED else "" for p in pairing])
    if unpaired.any():
        for column in speedups:  # NaN, or NA for the boolean `speedup_distinct`
            out[column] = out[column].where(~unpaired)
    return out


def _columns(path: Path, wanted: list[str]) -> list[str]:
    """The ``wanted`` columns that the Parquet file at ``path`` has (added keys may be absent)."""
    present = set(pq.read_schema(path).names)
    return [c for c in wanted if c in present]


@dataclass(frozen=True)
class Run:
    """One run folder: its summary table (required), manifest and optional ablation table."""

    path: Path
    summary: pd.DataFrame  # one row per cell: CELL_KEYS + metric columns (see metrics.summarize)
    manifest: dict[str, Any] = field(default_factory=dict)
    ablation: pd.DataFrame | None = None  # one row per variant × suite × budget, when present

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def device(self) -> str:
        """The device string of the manifest ("" when unknown)."""
        return str(self.manifest.get("device", ""))

    @cached_property
    def batch_steps(self) -> pd.Series:
        """Number of batched verify steps per cell (indexed by CELL_KEYS), from steps.parquet.

        Step timings belong to the batched forward, so "seconds per step" divides by this count,
        not by `n_steps` (which counts one row per sequence). Without steps.parquet, `n_steps` is
        exact only at batch size 1, so the other cells are NaN.
        """
        keys = list(CELL_KEYS)
        if (self.path / "steps.parquet").is_file():
            try:
                path = self.path / "steps.parquet"
                steps = with_cell_keys(pd.read_parquet(path, columns=_columns(path, [*keys, "batch_step"])))
                return steps.groupby(keys, dropna=False)["batch_step"].nunique().rename("batch_steps")
            except READ_ERRORS as err:
                warn(f"{self.path / 'steps.parquet'} is unreadable ({reason(err)}); counting steps from the summary")
        indexed = self.summary.set_index(keys)["n_steps"]
        return indexed.where(indexed.index.get_level_values("batch_size") == 1).rename("batch_steps")

    def divergences(self) -> pd.DataFrame | None:
        """Requests whose output differs from the baseline without an fp near-tie excuse (cell keys,
        `request`, `first_divergence` when recorded); None without a readable requests.parquet."""
        path = self.path / "requests.parquet"
        if not path.is_file():
            return None
        try:
            present = set(pq.read_schema(path).names) | set(ADDED_KEYS)  # read only these: outputs can be large
            if not {"lossless", "excused", *CELL_KEYS, "request"} <= present:
                return None
            columns = [*CELL_KEYS, "request", *(["first_divergence"] if "first_divergence" in present else [])]
            requests = with_cell_keys(pd.read_parquet(path, columns=_columns(path, [*columns, "lossless", "excused"])))
        except READ_ERRORS as err:
            warn(f"{path} is unreadable ({reason(err)}); going on without the divergent requests")
            return None
        bad = requests[~requests["lossless"].astype(bool) & ~requests["excused"].astype(bool)]
        return bad[columns].reset_index(drop=True)

    @cached_property
    def nodes(self) -> pd.DataFrame | None:
        """The verified trees' node rows (sweep.tables.NODE_COLUMNS); None when the run has none or
        the file is damaged (warned about once: the figures and tables built on it are left out)."""
        path = self.path / "nodes.parquet"
        if not path.is_file():
            return None
        try:
            return with_cell_keys(pd.read_parquet(path))
        except READ_ERRORS as err:
            warn(f"{path} is unreadable ({reason(err)}); going on without the node rows")
            return None

    def load_table(self) -> pd.DataFrame | None:
        """`report.load.load_table` of the run's serving-load cells (no SLO); None without load cells
        or without readable requests and cells tables."""
        if "load" not in self.summary or not self.summary["load"].ne("").any():
            return None
        try:
            requests, cells = (with_cell_keys(pd.read_parquet(self.path / f"{name}.parquet")) for name in ("requests", "cells"))
        except READ_ERRORS as err:
            warn(f"{self.path}: the load tables are unreadable ({reason(err)}); going on without the load figure")
            return None
        config = self.manifest.get("config") or {}
        return load_table(requests, cells, {}, config.get("n_boot", 1000), config.get("seed", 0))

    def cells(self, drafters: bool = True) -> pd.DataFrame:
        """Summary rows of the default variant; `drafters=False` keeps only the AR baseline."""
        rows = self.summary[self.summary["variant"] == DEFAULT_VARIANT]
        is_ar = rows["drafter"] == AR_ARM
        return rows[~is_ar if drafters else is_ar]


def head_record(run_path: Path, spec: dict[str, Any]) -> dict[str, Any] | None:
    """The config.json record of the head of the manifest's arm ``spec``: at its checkpoint, else in
    the run's own ``heads/`` (the sweep copies each record there), else in ``<run>/../heads/`` (a
    published baseline's); None when none of them reads."""
    from jetflow_bench.core.arms import HEAD_RECORDS, head_record_file

    name = head_record_file(spec["name"], spec.get("variant", DEFAULT_VARIANT))
    files = [Path(spec["checkpoint"]) / "config.json"] if spec.get("checkpoint") else []
    for file in [*files, run_path / HEAD_RECORDS / name, run_path.parent / HEAD_RECORDS / name]:
        try:
            return json.loads(file.read_text())
        except (OSError, json.JSONDecodeError):
            continue
    return None


def head_records(run_path: Path, manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Arm label -> its head's record (`head_record`); arms without one are left out."""
    from jetflow_bench.core.arms import arm_label

    specs = (manifest.get("config") or {}).get("drafters") or []
    records = {arm_label(s["name"], s.get("variant", DEFAULT_VARIANT)): head_record(run_path, s) for s in specs}
    return {label: record for label, record in records.items() if record is not None}


def old_recipe_heads(run_path: Path, manifest: dict[str, Any]) -> dict[str, str]:
    """Arm label -> "old jetflow recipe (...)" for each arm whose head was trained under a default
    since replaced (`drafters.block.old_recipe`), from its `head_records`."""
    from drafters.block import old_recipe

    notes = {}
    for label, record in head_records(run_path, manifest).items():
        old = old_recipe(record.get("drafter"), (record.get("training") or {}).get("config") or {})
        if old:
            notes[label] = old
    return notes


def load_run(path: str | Path) -> Run:
    """Read the run folder at `path`; raise JfbenchError naming the folder when it is not one."""
    folder = Path(path)
    fix = "pass a folder written by `jfbench sweep` or `jfbench ablate` (it holds summary.parquet)"
    if not folder.is_dir():
        raise JfbenchError(f"run folder {str(folder)!r} does not exist: {fix}")
    warn_damaged_cells(folder / "cells")
    summary, problems = _read_table(folder, "summary")
    if summary is None and problems:
        raise JfbenchError(f"{str(folder)!r} has no usable summary ({'; '.join(problems)}): {REBUILD}")
    if summary is None:
        raise JfbenchError(f"{str(folder)!r} is not a run folder (no summary.parquet or summary.csv): {fix}")
    summary = paired_only(with_cell_keys(summary))
    missing = [key for key in (*CELL_KEYS, "tau") if key not in summary.columns]
    if missing:
        raise JfbenchError(
            f"{str(folder / 'summary.parquet')!r} lacks the columns {missing}: re-run the sweep with this "
            "version of jfbench so the summary carries every cell key"
        )
    manifest: dict[str, Any] = {}
    if (folder / "manifest.json").is_file():
        try:
            manifest = json.loads((folder / "manifest.json").read_text())
        except (OSError, ValueError) as err:
            warn(f"{folder / 'manifest.json'} is not valid JSON ({reason(err)}); going on without the run's provenance")
    return Run(folder, summary, manifest, _read_table(folder, "ablation")[0])


def align(base: pd.DataFrame, other: pd.DataFrame, keys: list[str] | None = None) -> pd.DataFrame:
    """Outer join of two summaries on the cell keys, for comparing runs cell by cell.

    Columns: keys..., then every other column twice with suffixes `_base` and `_run`, and
    `_merge` ∈ {"both", "left_only" (only in base), "right_only" (only in other)}.
    """
    keys = list(CELL_KEYS) if keys is None else keys
    return base.merge(other, on=keys, how="outer", suffixes=("_base", "_run"), indicator=True)


def depth_columns(summary: pd.DataFrame, prefix: str = "a") -> list[str]:
    """`a_1, a_2, ...` (or `p_...`) present in `summary`, in depth order."""
    found = [c for c in summary.columns if c.startswith(f"{prefix}_") and c[len(prefix) + 1:].isdigit()]
    return sorted(found, key=lambda c: int(c[len(prefix) + 1:]))
