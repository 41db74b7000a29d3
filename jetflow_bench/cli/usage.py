"""Click's usage errors as jfbench prints them: a line or two on stderr, exit code 2, no traceback.

Two shapes, like the rest of the CLI:

- a bad value of a known option (out of range, not a number) is one ``error:`` line, the same as
  any check a command makes of its input (`JfbenchError`)::

      error: --limit 0: input should be greater than or equal to 1 (see 'jfbench sweep --help')

- a malformed command line (unknown command or option, missing required option) keeps click's
  usage line, then one ``error:`` line with a "did you mean" when a known name is close::

      Usage: jfbench sweep [OPTIONS]
      error: no such option: --budget; did you mean --budgets? (see 'jfbench sweep --help')

Click is matched by class name, not identity: Typer may bring its own copy of click.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from jetflow_bench.core.registry import close_names


def _kinds(err: BaseException) -> set[str]:
    return {kind.__name__ for kind in type(err).__mro__}


def is_usage_error(err: BaseException) -> bool:
    """A click ``UsageError`` (bad command line) or ``BadParameter`` (bad value)."""
    return "UsageError" in _kinds(err) and hasattr(err, "format_message")


def _given(argv: Sequence[str], opts: Sequence[str]) -> str | None:
    """The value given on the command line to the option called ``opts`` (last one wins)."""
    value = None
    for i, token in enumerate(argv):
        for opt in opts:
            if token == opt and i + 1 < len(argv):
                value = argv[i + 1]
            elif token.startswith(f"{opt}="):
                value = token[len(opt) + 1 :]
    return value


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".")
    return text[:1].lower() + text[1:]


def _did_you_mean(err: Any, ctx: Any) -> str:
    """"; did you mean --budgets?" for the closest known names (click's own list is looser)."""
    close: list[str] = []
    if getattr(err, "possibilities", None):
        close = close_names(err.option_name, sorted(err.possibilities), n=2, cutoff=0.75)
    unknown = re.match(r"No such command '([^']+)'", err.message or "")
    if unknown and ctx is not None:
        close = close_names(unknown.group(1), ctx.command.list_commands(ctx))
    return f"; did you mean {' or '.join(close)}?" if close else ""


def usage_lines(err: Any, argv: Sequence[str]) -> list[str]:
    """What to print on stderr for the usage error ``err`` raised while parsing ``argv``."""
    ctx = getattr(err, "ctx", None)
    if "NoArgsIsHelpError" in _kinds(err) and ctx is not None:  # `jfbench bench` alone: its help
        return [ctx.get_help()]
    see = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    param = getattr(err, "param", None)
    if "BadParameter" in _kinds(err) and "MissingParameter" not in _kinds(err) and param is not None:
        opts = list(getattr(param, "opts", None) or [param.name])
        value = _given(argv, opts)
        name = opts[0] if value is None else f"{opts[0]} {value}"
        return [f"error: {name}: {_sentence(err.message)}{see}"]
    message = err.message if "NoSuchOption" in _kinds(err) else err.format_message()
    message = _sentence(re.sub(r"\.?\s*Did you mean .*$", "", message))  # Typer's own hint: ours replaces it
    lines = [ctx.get_usage()] if ctx is not None else []
    return [*lines, f"error: {message}{_did_you_mean(err, ctx)}{see}"]
