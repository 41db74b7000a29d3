"""What the task YAMLs next to this file call (``!function suite_tasks.…``): records, prompts, checks.

Every prompt and every answer check is the jfbench suite's own (`suites`), so a harness score and
a jfbench run agree on the same record and completion.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from jetflow_bench.core.errors import JfbenchError
from suites import Record, Suite, get_suite
from suites.code_suites import ExecutedCodeSuite


@cache
def _suite(name: str) -> Suite:
    suite = get_suite(name)
    suite.data = replace(suite.data, hub=None, package=None)  # the data folder only, never the hub
    return suite


def data_folder(data_dir: str | None) -> Path:
    """The harness metadata's ``data_dir``, else ``JFBENCH_DATA_DIR``; it must exist."""
    root = data_dir or os.environ.get("JFBENCH_DATA_DIR")
    if not root:
        raise JfbenchError(
            "the jfbench harness tasks read a data folder: pass --metadata '{\"data_dir\": \"DIR\"}' "
            "or set JFBENCH_DATA_DIR (layout: docs/methodology.md, Data)"
        )
    if not Path(root).is_dir():
        raise JfbenchError(f"data folder {root} does not exist: pass the folder with the benchmark data files")
    return Path(root)


def load_docs(suite: str, data_dir: str | None = None, **metadata: Any) -> dict[str, Any]:
    """The harness ``custom_dataset``: the suite's records as one ``test`` split, in file order."""
    import datasets

    spec = _suite(suite)
    root = data_folder(data_dir)
    if not (root / spec.data.local).is_file():
        raise JfbenchError(f"suite {suite!r} needs {root / spec.data.local}: put the file into the data folder")
    rows = [doc(spec, record) for record in spec.load(root)]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def doc(suite: Suite, record: Record) -> dict[str, str]:
    """One harness document; the record travels as JSON so fields of mixed types survive `datasets`."""
    reference = getattr(suite, "reference", None)
    target = reference(record.fields) if reference else record.fields.get("answer", "")
    return {
        "suite": suite.name, "record_id": record.id, "record": json.dumps(dict(record.fields)),
        "plain_prompt": suite.plain_prompt(record), "user_message": suite.user_message(record),
        "target": str(target or ""),
    }


def plain_prompt(doc: dict[str, str]) -> str:
    return doc["plain_prompt"]


def user_message(doc: dict[str, str]) -> str:
    return doc["user_message"]


def target(doc: dict[str, str]) -> str:
    return doc["target"]


def process_results(doc: dict[str, str], results: list[str]) -> dict[str, float]:
    """The suite's own check of the (already cut) completion: exact_match, or pass@1 for code."""
    suite = _suite(doc["suite"])
    record = Record(suite.name, doc["record_id"], json.loads(doc["record"]))
    metric = "pass@1" if isinstance(suite, ExecutedCodeSuite) else "exact_match"
    return {metric: float(bool(suite.check(record, results[0])))}
