"""Every command's `--help` at 80 columns: option names whole, examples that paste, prose re-flowed.

The bugs: rich's option table cut long names to fit (`--tensor-parall…`); examples were broken
over lines without a `\\`, so a pasted example ran half a command; a docstring's own line breaks
survived inside re-wrapped paragraphs, leaving ragged short lines.
"""

from __future__ import annotations

import re

import pytest
import typer

from jetflow_bench.cli import app, main
from jetflow_bench.cli.helptext import plain_help


def _commands() -> list[tuple[list[str], object]]:
    from jetflow_bench.cli import _register_commands

    _register_commands()
    found = []

    def walk(command: object, prefix: list[str]) -> None:
        subs = getattr(command, "commands", None)
        if subs:
            for name, sub in subs.items():
                walk(sub, [*prefix, name])
        else:
            found.append((prefix, command))

    walk(typer.main.get_command(app), [])
    return found


def _help(argv: list[str], width: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setattr("sys.argv", ["jfbench", *argv, "--help"])
    try:
        main()
    except SystemExit as stop:
        assert not stop.code, argv
    return capsys.readouterr().out


def test_every_help_at_80_columns_names_options_whole_and_examples_paste(monkeypatch, capsys):
    commands = _commands()
    assert len(commands) > 15  # every command, not an empty walk
    for argv, command in commands:
        text = _help(argv, 80, monkeypatch, capsys)
        assert "…" not in text, argv
        for param in command.params:
            for opt in [*param.opts, *param.secondary_opts]:
                if opt.startswith("--"):
                    assert re.search(rf"(^|[\s,/]){re.escape(opt)}([\s,/=]|$)", text, re.M), (argv, opt)
        lines = text.splitlines()
        for before, line in zip(lines, lines[1:], strict=False):
            if re.match(r"\s{6,}--", line) and before.lstrip().startswith(("jfbench", "--")) and "  " not in before.strip():
                assert before.endswith(" \\"), (argv, before, line)  # an example's continuation


def test_prose_reflows_with_the_terminal(monkeypatch, capsys):
    narrow = _help(["sweep"], 80, monkeypatch, capsys)
    wide = _help(["sweep"], 120, monkeypatch, capsys)
    assert max(map(len, narrow.splitlines()[:10])) <= 80
    assert len(wide.splitlines()) < len(narrow.splitlines())  # prose uses the extra width
    first = "Every batch size also runs the AR baseline"
    paragraph = [line for line in wide.splitlines() if first in line][0]
    assert len(paragraph.strip()) > 100  # not cut at the docstring's own line breaks


def test_plain_help_joins_example_continuations_and_breaks_long_ones_with_backslashes():
    doc = """Do it.

    Examples:

        jfbench sweep --target Qwen/Qwen3-8B --drafters ngram,eagle=heads/eagle,jetflow=heads/jf
            --suites gsm8k,math500 --budgets 16,64,256 --out results/qwen8b

        jfbench show RUN
    """
    paragraphs = plain_help(doc).split("\n\n")
    lines = paragraphs[2].splitlines()
    assert lines[0] == "\b" and paragraphs[3] == "\b\n    jfbench show RUN"  # verbatim blocks; short ones as written
    command = " ".join(line.rstrip("\\").strip() for line in lines[1:])
    assert command == ("jfbench sweep --target Qwen/Qwen3-8B --drafters ngram,eagle=heads/eagle,jetflow=heads/jf "
                       "--suites gsm8k,math500 --budgets 16,64,256 --out results/qwen8b")
    assert len(lines) > 2 and all(line.endswith(" \\") for line in lines[1:-1]) and not lines[-1].endswith("\\")
