"""Results on stdout in one `--format` vocabulary for every command: table, csv, json, markdown.

Commands that print one object rather than rows (a report's files, a target's record, a suite's
prompts) take ``table`` (text for people) and ``json``; `object_format` refuses the other two.

``table`` is rich text for people. Rich fits a table to the console by wrapping cells and, when
that is not enough, cutting them to "…"; `print_table` never cuts a value. On a terminal, or
wherever COLUMNS gives a width, a table fits that width: text cells wrap, and a table too wide even
then is folded into parts of its columns, each repeating the row names. Off a terminal without
COLUMNS (piped, CI logs) a table keeps its natural width, so "livecodebench" is not broken over two
lines. `say` wraps a note to the same width. ``csv``, ``json`` (a list of row objects) and
``markdown`` are for scripts and documents.
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

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.progress import output_width


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
    """Print a rich table with every value whole, within `output_width` (folded into parts of its
    columns where it must be) or, off a terminal without COLUMNS, at its natural width."""
    width = output_width()
    measured = Console(width=100_000).measure(table)
    if width is None:
        wide = Console(file=console.file, width=max(measured.maximum, 1), force_terminal=console.is_terminal,
                       no_color=console.no_color, highlight=False)
        wide.print(table)
        return
    fitted = Console(file=console.file, width=width, force_terminal=console.is_terminal, no_color=console.no_color,
                     highlight=False)
    for part in [table] if measured.minimum <= width else fold(table, width):
        fitted.print(part)


def fold(table: Table, width: int) -> list[Table]:
    """``table`` as parts of at most ``width`` columns of text, each with the row-name columns (the
    left-justified ones) and as many of the others as fit, in their order."""
    names = [c for c in table.columns if c.justify == "left"]
    parts: list[list] = [[]]
    for column in (c for c in table.columns if c.justify != "left"):
        trial = _part(table, [*names, *parts[-1], column])
        if parts[-1] and Console(width=100_000).measure(trial).minimum > width:
            parts.append([])
        parts[-1].append(column)
    return [_part(table, [*names, *columns], title=table.title if i == 0 else f"{table.title or ''} (continued)",
                  caption=table.caption if i == len(parts) - 1 else None)
            for i, columns in enumerate(parts)]


def _part(table: Table, columns: list, title: Any = None, caption: Any = None) -> Table:
    part = Table(title=title, caption=caption, box=table.box, show_edge=table.show_edge, pad_edge=table.pad_edge,
                 collapse_padding=table.collapse_padding, show_header=table.show_header)
    for column in columns:
        part.add_column(column.header, justify=column.justify, no_wrap=column.no_wrap, min_width=column.min_width,
                        style=column.style, header_style=column.header_style)
    cells = [list(column._cells) for column in columns]  # noqa: SLF001 (rich keeps a column's cells there)
    for row in zip(*cells, strict=True):
        part.add_row(*row)
    return part


def rich_table(rows: Sequence[Row], title: str | None = None, caption: str | None = None,
               left: Sequence[str] = ()) -> Table:
    """Rows -> a rich table; values go in as plain Text, so "arm[opt=1]" is never read as markup."""
    table = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  collapse_padding=True)  # no vertical rules, two spaces between columns: the width goes to data
    columns = list(rows[0]) if rows else []
    for column in columns:
        if column in left:  # text may wrap inside its cell, and a path fold over lines, never be cut
            table.add_column(column, justify="left", overflow="fold")
        else:  # numbers never wrap, and their width is what print_table must keep
            width = max(Text(_text(v)).cell_len for v in [column, *(row[column] for row in rows)])
            table.add_column(column, justify="right", no_wrap=True, min_width=width)
    for row in rows:
        table.add_row(*(Text(_text(row[c]), overflow="fold") for c in columns))
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
