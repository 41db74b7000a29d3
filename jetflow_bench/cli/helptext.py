"""`--help` that reads well at any terminal width.

Commands write their help as docstrings: prose paragraphs, and indented blocks (examples, lists).
Rich's help panels keep a docstring's line breaks inside re-wrapped paragraphs (ragged lines) and
cut option names to fit their table (`--tensor-parall…`), so jfbench prints click's plain help
instead, as `vllm` and `lm_eval` print argparse's: prose re-flows to the terminal (up to
`MAX_WIDTH`), option names are never cut, and indented blocks are kept line for line. An example
command too long for 80 columns is broken before its options with a trailing `\\`, so it pastes
into a shell as it is printed.
"""

from __future__ import annotations

import inspect
import re

import typer

MAX_WIDTH = 120  # help text re-flows up to this many columns
EXAMPLE_WIDTH = 72  # an example line's longest length (click indents help by 2, blocks by 4 more)
_BREAK = re.compile(r" (?=--|&& |\| )")  # where an example command may be broken: before an option or a pipe


def plain_help(doc: str) -> str:
    """A docstring as click help: prose paragraphs as they are (click re-flows them), each indented
    block marked verbatim (click's ``\\b``), with continuation lines joined into one command and
    commands longer than `EXAMPLE_WIDTH` broken with ``\\``; other block lines stay as written."""
    paragraphs = []
    for paragraph in inspect.cleandoc(doc).split("\n\n"):
        lines = paragraph.splitlines()
        if not lines or not lines[0].startswith(" "):
            paragraphs.append(paragraph)
            continue
        indent = len(lines[0]) - len(lines[0].lstrip())
        logical: list[str] = []
        for line in lines:
            deeper = len(line) - len(line.lstrip()) > indent
            if deeper and logical and _is_command(logical[-1]):
                logical[-1] += " " + line.strip()
            else:
                logical.append(line.rstrip())
        paragraphs.append("\b\n" + "\n".join(_fold(line, indent) for line in logical))
    return "\n\n".join(paragraphs)


def _is_command(line: str) -> bool:
    return re.match(r"\s*([A-Z_]+=\S+ )*(jfbench|python|lm_eval|vllm) ", line) is not None


def _fold(line: str, indent: int) -> str:
    """``line`` as is when short or not a command, else broken before options with `` \\``."""
    if len(line) <= EXAMPLE_WIDTH or not _is_command(line):
        return line
    pieces = _BREAK.split(line.strip())
    out, current = [], " " * indent + pieces[0]
    for piece in pieces[1:]:
        if len(current) + 1 + len(piece) + 2 > EXAMPLE_WIDTH:
            out.append(current + " \\")
            current = " " * (indent + 2) + piece
        else:
            current += " " + piece
    return "\n".join([*out, current])


def use_plain_help(app: typer.Typer) -> None:
    """Switch ``app`` and its sub-apps to click's help, with every command's help as `plain_help`."""
    app.rich_markup_mode = None
    app.info.context_settings = {**(app.info.context_settings or {}), "max_content_width": MAX_WIDTH}
    for command in app.registered_commands:
        doc = command.help or inspect.getdoc(command.callback) or ""
        command.help = plain_help(doc)
        command.context_settings = {**(command.context_settings or {}), "max_content_width": MAX_WIDTH}
    for group in app.registered_groups:
        use_plain_help(group.typer_instance)
