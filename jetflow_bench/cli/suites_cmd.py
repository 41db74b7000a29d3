"""`jfbench suites ...`: where each benchmark's data is found, and the exact prompts it produces."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from jetflow_bench.cli import app
from jetflow_bench.cli.options import DataDirOpt
from jetflow_bench.cli.output import ObjectFormatOpt, TableFormat, TableFormatOpt, emit, object_format
from jetflow_bench.core.errors import JfbenchError
from suites import SUITES, get_suite
from suites.sources import MissingData

suites_app = typer.Typer(
    help="Benchmark suites: where their data comes from and what prompts they produce.",
    no_args_is_help=True,
)
app.add_typer(suites_app, name="suites")


SkipBadOpt = Annotated[
    bool, typer.Option("--skip-bad", help="Skip malformed records (and count them) instead of stopping.")
]


def _summary(name: str, data_dir: Path | None, skip_bad: bool) -> dict[str, Any]:
    suite = get_suite(name)
    row: dict[str, Any] = {
        "suite": name,
        "default_max_new_tokens": suite.default_max_new_tokens,
        "scored": suite.scored,
        "unscored_reason": suite.unscored_reason,
    }
    try:
        loaded = suite.load(data_dir, skip_bad=skip_bad)
    except MissingData as err:  # one missing suite must not hide the others
        why = f"no data ({'; '.join(err.tried)}); the data folder needs {suite.data.local}"
        return {**row, "found": "missing", "source": why, "records": None, "skipped": None}
    except JfbenchError as err:
        return {**row, "found": "unreadable", "source": str(err), "records": None, "skipped": None}
    return {
        **row,
        "found": loaded.kind,
        "source": loaded.source,
        "records": loaded.total,
        "skipped": loaded.skipped,
    }


@suites_app.command("list")
def list_suites(
    data_dir: DataDirOpt = None, skip_bad: SkipBadOpt = False, fmt: TableFormatOpt = TableFormat.table
) -> None:
    """Every registered suite, where its data was found (path, hub or package) and its record count.

    A suite without data is a line on stderr (what was tried, which file the data folder lacks) and
    makes the exit code 1, so scripts and CI notice; docs/methodology.md ("Data") has the layout.

    Examples:

      jfbench suites list --data-dir ~/data/jfbench

      JFBENCH_DATA_DIR=~/data/jfbench jfbench suites list --format json
    """
    rows = [_summary(name, data_dir, skip_bad) for name in SUITES.names()]
    if fmt is TableFormat.json:
        typer.echo(json.dumps({"suites": rows}, indent=2))
    else:
        _print_found(rows, fmt)
    missing = [row for row in rows if row["records"] is None]
    for row in missing:
        typer.echo(f"error: {row['suite']}: {row['source']}", err=True)
    if missing:
        raise typer.Exit(1)


def _print_found(rows: list[dict[str, Any]], fmt: TableFormat) -> None:
    """The suites that have data, as a table (the others are an error line each)."""
    shown = []
    for row in rows:
        if row["records"] is None:
            continue
        records = str(row["records"])
        if row["skipped"]:
            records += f" ({row['skipped']} skipped)"
        shown.append({
            "suite": row["suite"], "records": records, "found": row["found"], "source": row["source"],
            "max new tokens": row["default_max_new_tokens"],
            "scored": "yes" if row["scored"] else f"no: {row['unscored_reason']}",
        })
    emit(shown, fmt, title="jfbench suites", left=("suite", "found", "source", "scored"))


def _load_tokenizer(name_or_path: str | None) -> Any:
    if name_or_path is None:
        return None
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name_or_path)
    except (OSError, ValueError) as err:
        raise JfbenchError(
            f"--tokenizer {name_or_path!r} could not be loaded ({type(err).__name__}): "
            "pass a local model/tokenizer folder or a reachable Hugging Face hub id"
        ) from err


@suites_app.command("show")
def show(
    name: Annotated[str, typer.Argument(help="Suite name or alias, e.g. gsm8k, mt-bench.")],
    n: Annotated[int, typer.Option("--n", min=1, help="How many records to show.")] = 2,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            "--tokenizer",
            help="Tokenizer folder or hub id; its chat template (if any) formats the prompts. "
            "Default: plain completion prompts.",
        ),
    ] = None,
    sample_seed: Annotated[
        int | None, typer.Option("--sample-seed", min=0, help="Show a seeded random sample instead of the first N.")
    ] = None,
    max_new_tokens: Annotated[
        int | None, typer.Option("--max-new-tokens", min=1, help="Override the suite's generation length.")
    ] = None,
    data_dir: DataDirOpt = None,
    skip_bad: SkipBadOpt = False,
    fmt: ObjectFormatOpt = TableFormat.table,
) -> None:
    """Print the exact prompts (and lengths and stop strings) a suite sends to the model.

    Examples:

      jfbench suites show gsm8k --n 2

      jfbench suites show math500 --tokenizer Qwen/Qwen3-8B --sample-seed 0
    """
    suite = get_suite(name)
    loaded = suite.load(data_dir, limit=n, sample_seed=sample_seed, skip_bad=skip_bad)
    requests = suite.requests(loaded.records, _load_tokenizer(tokenizer), max_new_tokens)
    if object_format(fmt) is TableFormat.json:
        shown = {"suite": suite.name, "source": loaded.source, "records": loaded.total}
        typer.echo(json.dumps({**shown, "requests": [asdict(r) for r in requests]}, indent=2))
        return
    console = Console()
    console.print(f"[bold]{suite.name}[/bold] from {escape(loaded.source)} ({loaded.total} records)")
    for request in requests:
        title = f"{request.record_id} · max_new_tokens {request.max_new_tokens} · stop {list(request.stop)!r}"
        console.rule(Text(title), style="dim")
        console.print(Text(request.prompt), soft_wrap=True)  # Text: brackets in prompts are not markup
