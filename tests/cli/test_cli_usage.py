"""Bad command lines: a usage line and/or one `error:` line, exit 2, never a traceback."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jetflow_bench.cli as cli_module
from jetflow_bench.cli import sweep_cmd

Cli = Callable[..., tuple[int, str, str]]


def assert_usage_error(result: tuple[int, str, str], *expected: str) -> list[str]:
    code, out, err = result
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and "Traceback" not in err, result
    assert lines[-1].startswith("error: ") and len(lines) <= 2, err
    for text in expected:
        assert text in lines[-1], (text, err)
    return lines


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["nosuch"], ["no such command 'nosuch'", "see 'jfbench --help'"]),
        (["swep"], ["did you mean sweep?"]),
        (["bench", "nosuch"], ["no such command 'nosuch'", "see 'jfbench bench --help'"]),
        (["bench", "basline"], ["did you mean baseline?"]),
        (["sweep", "--nosuchoption"], ["no such option: --nosuchoption", "see 'jfbench sweep --help'"]),
        (["sweep", "--budget", "4", "--target", "t", "--out", "o"], ["did you mean --budgets?"]),
        (["sweep"], ["missing option '--target'"]),
        (["show"], ["missing argument"]),
    ],
)
def test_a_malformed_command_line_gets_the_usage_line_and_a_hint(cli: Cli, args: list[str], expected: list[str]) -> None:
    lines = assert_usage_error(cli(*args), *expected)
    assert lines[0].startswith("Usage: jfbench")


def _commands() -> Iterator[tuple[list[str], object]]:
    """(command path, click command) of every leaf command of the CLI."""
    import typer.main

    cli_module._register_commands()

    def walk(command: object, path: list[str]) -> Iterator[tuple[list[str], object]]:
        subcommands = getattr(command, "commands", None)
        if subcommands:
            for name, sub in subcommands.items():
                yield from walk(sub, [*path, name])
        else:
            yield path, command

    yield from walk(typer.main.get_command(cli_module.app), [])


def _is_int(param: object) -> bool:
    bare = getattr(param, "bare_type", None)  # Typer with its own click
    kind = bare() if callable(bare) else getattr(getattr(param, "type", None), "name", None)
    return kind in (int, "int", "integer")


INT_OPTIONS = [
    (path, param.opts[0], getattr(param, "min", None), value)
    for path, command in _commands()
    for param in command.params  # type: ignore[attr-defined]
    if param.param_type_name == "option" and _is_int(param)
    for value in (0, -1)
]


class Reached(Exception):
    """The command's body would have started: the command line was accepted."""


@pytest.fixture
def bodies_stubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command body raises `Reached` (the CLI is parsed for real; nothing runs)."""

    def stub(callback: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(callback)  # keeps the signature Typer builds the options from
        def reached(*args: object, **kwargs: object) -> None:
            raise Reached

        return reached

    def patch(typer_app: object) -> None:
        for info in typer_app.registered_commands:  # type: ignore[attr-defined]
            monkeypatch.setattr(info, "callback", stub(info.callback))
        for group in typer_app.registered_groups:  # type: ignore[attr-defined]
            patch(group.typer_instance)

    cli_module._register_commands()
    patch(cli_module.app)


def _required(path: list[str]) -> list[str]:
    """Placeholder values for a command's required options and arguments."""
    command = dict((tuple(p), c) for p, c in _commands())[tuple(path)]
    args: list[str] = []
    for param in command.params:  # type: ignore[attr-defined]
        if param.required:
            args += [param.opts[0], "x"] if param.param_type_name == "option" else ["x"]
    return args


def test_every_command_has_its_integer_options_checked() -> None:
    assert len(INT_OPTIONS) >= 2 * 30  # the walk found the CLI's integer options (sweep, train, ...)
    assert {"--limit", "--max-new-tokens", "--seed", "--threads", "--repeats"} <= {o for _, o, _, _ in INT_OPTIONS}


@pytest.mark.parametrize(("path", "option", "least", "value"), INT_OPTIONS,
                         ids=[f"{' '.join(p)} {o} {v}" for p, o, _, v in INT_OPTIONS])
def test_every_integer_option_at_0_and_minus_1(
    cli: Cli, bodies_stubbed: None, path: list[str], option: str, least: int | None, value: int
) -> None:
    assert least is not None, f"{' '.join(path)} {option} has no lower bound"  # negative seeds crash numpy
    try:
        result = cli(*path, *_required(path), option, str(value))
    except Reached:
        assert value >= least  # accepted only when in range
        return
    assert value < least
    assert_usage_error(result, f"{option} {value}: input should be greater than or equal to {least}")


@pytest.mark.parametrize(
    "args",
    [
        ["sweep", "--target", "t", "--out", "/proc/forbidden"],
        ["train", "--drafter", "eagle", "--target", "t", "--out", "/proc/forbidden"],
        ["report", "results/baselines/ci", "--out", "/proc/forbidden/r.html"],
    ],
)
def test_an_unwritable_out_folder_is_one_line_naming_it(cli: Cli, args: list[str]) -> None:
    assert_usage_error(cli(*args), "--out /proc/forbidden: cannot write there")


def test_a_malformed_drafter_spec_is_about_the_spec_and_its_syntax(cli: Cli, tmp_path: Path) -> None:
    result = cli("sweep", "--target", "t", "--out", str(tmp_path / "run"), "--drafters", "ngram:nosuchoption=3")
    assert_usage_error(result, "'ngram:nosuchoption' is not a drafter name; did you mean ngram[nosuchoption=3]?",
                       "NAME[KEY=VALUE,...]=CHECKPOINT_DIR")


LIST_OPTIONS = ["--budgets", "--batch-sizes", "--drafters", "--suites"]
# What a shell can pass: no NUL, no lone surrogates (those only come from undecodable bytes).
ARGUMENT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=24)


def test_control_characters_in_a_value_keep_the_error_on_one_line(cli: Cli, tmp_path: Path) -> None:
    # Found by the property test below: "\x1e" (a record separator) counts as a line break.
    for value in ("0\x1e0:0", "a\nb"):
        code, out, err = cli("sweep", "--target", "t", "--out", str(tmp_path / "run"), "--drafters", value)
        assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: "), (value, err)


@pytest.mark.parametrize("option", LIST_OPTIONS)
@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=ARGUMENT)
def test_random_list_values_exit_0_or_2_never_a_traceback(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, option: str, text: str
) -> None:
    monkeypatch.setattr(sweep_cmd, "run_and_report", lambda *args, **kwargs: None)  # validated: stop there
    code, out, err = cli("sweep", "--target", "t", "--out", str(tmp_path / "run"), option, text)
    assert code in (0, 2) and "Traceback" not in err, (text, err)
    if code == 2:
        assert err.strip().splitlines()[-1].startswith("error: "), (text, err)


def test_sweep_and_ablate_build_every_grid_flag_from_its_one_declaration() -> None:
    """Both commands get each `GridFlags` field as the option declared on it (same spellings, help,
    default), in declaration order, and hand back a `GridFlags`: a field the builder dropped, a
    command that typed its own copy, or options reordered would show here."""
    import dataclasses

    import typer.main

    from jetflow_bench.cli.grid_options import GRID

    group = typer.main.get_command(cli_module.app)
    names = [f.name for f in dataclasses.fields(GRID)]
    seen = {}
    for command in ("sweep", "ablate"):
        params = {p.name: p for p in group.commands[command].params}  # type: ignore[attr-defined]
        assert [n for n in params if n in names] == names, command
        seen[command] = [(p.opts, p.secondary_opts, p.default, getattr(p, "help", None)) for n, p in params.items()
                         if n in names]
        assert [d for _, _, d, _ in seen[command]] == [getattr(GRID, n) for n in names], command
    assert seen["sweep"] == seen["ablate"]
