"""Results on stdout in one `--format` vocabulary for every command: table, csv, json, markdown.

Commands that print one object rather than rows (a report's files, a target's record, a suite's
prompts) take ``table`` (text for people) and ``json``; `object_format` refuses the other two.

``table`` is rich text for people. Rich fits a table to the console by wrapping cells and, when
that is not enough, cutting them to "…"; `print_table` widens the console instead so that values
stay whole (off a terminal — piped, CI logs — to the natural width, so "livecodebench" is not
broken over two lines either). ``csv``, ``json`` (a list of row
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
from rich import box
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
    """Print a rich table with every value whole. Off a terminal the table gets its natural width
    (no cell wraps); on one, text cells may wrap but a table too wide even then is printed wider
    than the terminal (which wraps the lines; `less -S` scrolls them) rather than cut to "…"."""
    measured = Console(width=100_000).measure(table)
    needed = measured.minimum if console.is_terminal else measured.maximum
    if needed > console.width:
        console = Console(file=console.file, width=needed, force_terminal=console.is_terminal,
                          no_color=console.no_color, highlight=False)
    console.print(table)


def rich_table(rows: Sequence[Row], title: str | None = None, caption: str | None = None,
               left: Sequence[str] = ()) -> Table:
    """Rows -> a rich table; values go in as plain Text, so "arm[opt=1]" is never read as markup."""
    table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  collapse_padding=True)  # no vertical rules, two spaces between columns: the width goes to data
    columns = list(rows[0]) if rows else []
    for column in columns:
        if column in left:  # text may wrap inside its cell
            table.add_column(column, justify="left")
        else:  # numbers never wrap, and their width is what print_table must keep
            width = max(Text(_text(v)).cell_len for v in [column, *(row[column] for row in rows)])
            table.add_column(column, justify="right", no_wrap=True, min_width=width)
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
