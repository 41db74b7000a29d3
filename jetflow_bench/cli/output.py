"""Results on stdout in one `--format` vocabulary for every command: table, csv, json, markdown.

Commands that print one object rather than rows (a report's files, a target's record, a suite's
prompts) take ``table`` (text for people) and ``json``; `object_format` refuses the other two.

``table`` is rich text for people. When stdout is not a terminal (piped, redirected, CI logs)
rich would wrap long cell values at 80 columns — "livecodebench" broken over two lines — so the
console is widened to the table's natural width instead. ``csv``, ``json`` (a list of row
objects) and ``markdown`` are for scripts and documents.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from jetflow_bench.errors import JfbenchError


class TableFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    markdown = "markdown"


TableFormatOpt = Annotated[
    TableFormat,
    typer.Option("--format", help="table (rich text for people), csv, json (a list of rows) or markdown."),
]

ObjectFormatOpt = Annotated[
    TableFormat,
    typer.Option("--format", help="table (text for people) or json (one object on stdout, for scripts)."),
]

Row = Mapping[str, Any]


def object_format(fmt: TableFormat) -> TableFormat:
    """``fmt`` for a command that prints one object: csv and markdown need rows, so they are refused."""
    if fmt in (TableFormat.csv, TableFormat.markdown):
        raise JfbenchError(f"--format {fmt.value}: this command prints one object, not rows; use table or json")
    return fmt


def print_table(console: Console, table: Table) -> None:
    """Print a rich table without wrapping cell values when the output is not a terminal."""
    if not console.is_terminal:
        natural = Console(width=100_000).measure(table).maximum
        console = Console(file=console.file, width=max(console.width, natural), force_terminal=False)
    console.print(table)


def rich_table(rows: Sequence[Row], title: str | None = None, caption: str | None = None,
               left: Sequence[str] = ()) -> Table:
    """Rows -> a rich table; values go in as plain Text, so "arm[opt=1]" is never read as markup."""
    table = Table(title=title, caption=caption)
    columns = list(rows[0]) if rows else []
    for column in columns:
        table.add_column(column, justify="left" if column in left else "right")
    for row in rows:
        table.add_row(*(Text(_text(row[c])) for c in columns))
    return table


def markdown(rows: Sequence[Row]) -> str:
    if not rows:
        return ""
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    cells = [[_text(row[c]).replace("|", "\\|") for c in columns] for row in rows]
    return "\n".join(lines + ["| " + " | ".join(cell) + " |" for cell in cells])


def emit(rows: Sequence[Row], fmt: TableFormat, title: str | None = None, caption: str | None = None,
         left: Sequence[str] = ()) -> None:
    """Write ``rows`` (dicts sharing their keys) to stdout in ``fmt``."""
    if fmt is TableFormat.json:
        typer.echo(json.dumps(list(rows), default=str))
    elif fmt is TableFormat.csv:
        buffer = io.StringIO()
        if rows:
            writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
            writer.writeheader()
            writer.writerows(rows)
        typer.echo(buffer.getvalue(), nl=False)
    elif fmt is TableFormat.markdown:
        typer.echo(markdown(rows))
    else:
        print_table(Console(), rich_table(rows, title, caption, left))


def _text(value: Any) -> str:
    return "" if value is None else str(value)
