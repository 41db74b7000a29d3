"""Whether a run folder's files can be used, said in one line that names the damaged file.

A run folder outlives crashes, full disks and half-finished copies, so nothing trusts a file
because it exists: the sweep's resume checks every finished cell's parts before keeping the cell,
and `show`, `report` and `check` check what they read, warn about each damaged file and go on
with the rest. Checks read only a parquet file's footer (schema and row count), so a scan of a
large run stays cheap; a file damaged inside but with an intact footer fails on the full read
instead, which callers catch as `READ_ERRORS`. Imports only pyarrow: readers stay torch-free.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

READ_ERRORS = (OSError, ValueError, pa.ArrowException)  # what reading a damaged file raises


def reason(err: BaseException) -> str:
    """The first line of an exception, short enough for a one-line message."""
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:160]}" if text else type(err).__name__


def parquet_problem(path: Path, columns: Iterable[str] = (), rows: int | None = None) -> str | None:
    """None when ``path`` is a readable parquet file with ``columns`` and ``rows`` rows, else why not."""
    if not path.is_file():
        return f"{path} is missing"
    try:
        meta = pq.read_metadata(path)
        names = set(meta.schema.to_arrow_schema().names)
    except READ_ERRORS as err:
        return f"{path} is unreadable ({reason(err)})"
    missing = [c for c in columns if c not in names]
    if missing:
        return f"{path} lacks the columns {missing}"
    if rows is not None and meta.num_rows != rows:
        return f"{path} has {meta.num_rows} rows where its cell record says {rows}"
    return None


def cell_problems(cells_dir: Path, cell_id: str, record: dict, columns: dict[str, Iterable[str]]) -> str | None:
    """Why the finished cell ``cell_id`` (its ``.json`` record read) cannot be used, or None.

    ``columns``: part name ("steps", "requests") -> the columns it must have. Row counts come from
    the record (``n_steps``, ``n_requests``); records written before ``n_steps`` existed skip it.
    """
    counts = {"steps": record.get("n_steps"), "requests": record.get("n_requests")}
    for part, needed in columns.items():
        rows = counts.get(part)
        problem = parquet_problem(cells_dir / f"{cell_id}.{part}.parquet", needed, rows if isinstance(rows, int) else None)
        if problem:
            return problem
    return None


def damaged_cells(cells_dir: Path) -> list[str]:
    """One line per finished cell in ``cells_dir`` whose record or parts are damaged."""
    problems = []
    for record_path in sorted(cells_dir.glob("*.json")) if cells_dir.is_dir() else []:
        try:
            record = json.loads(record_path.read_text())
        except (OSError, ValueError) as err:
            problems.append(f"{record_path} is not valid JSON ({reason(err)})")
            continue
        if not isinstance(record, dict):
            problems.append(f"{record_path} is not a cell record")
            continue
        problem = cell_problems(cells_dir, record_path.stem, record, {"steps": (), "requests": ()})
        if problem:
            problems.append(problem)
    return problems


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def warn_damaged_cells(cells_dir: Path) -> None:
    """A warning per damaged finished cell: readers go on, and the sweep's next run redoes it."""
    for problem in damaged_cells(cells_dir):
        warn(f"{problem}; the tables may lack that cell until the sweep's next run (same command) redoes it")
