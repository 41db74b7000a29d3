"""Family recipe options on the command line, read from the families' declarations.

`jfbench train` and `jfbench ablate` take a drafter family's own recipe fields (its
`RecipeOption`s, declared on its record, `jetflow_bench.plugins.Family`) as ``--NAME VALUE`` (a bool
one also bare, ``--match-depth1``) or ``--option NAME=VALUE``; the commands let such flags through
as extra arguments and this module matches them against the declarations, so a family adds a field
without touching the CLI. `ablate` also takes each drafter's drafting options
(its family's axes, e.g. ``--refine-passes 0,2``) this way. The help epilog lists them all.
"""

from __future__ import annotations

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.registry import did_you_mean
from jetflow_bench.plugins import drafting_help, drafting_options, families, options_help
from jetflow_bench.training.recipe import RecipeOption

# Typer settings of a command that accepts family flags: unknown --flags reach `ctx.args`.
EXTRA_FLAGS = {"allow_extra_args": True, "ignore_unknown_options": True}


def declared_flags(drafting: bool = False) -> dict[str, RecipeOption]:
    """``--flag`` -> its declaration, over every registered family's recipe fields and, with
    ``drafting`` (`ablate`), every drafter's drafting options (one flag may serve several)."""
    declared = [o for family in families() for o in family.recipe]
    return {o.flag: o for o in [*declared, *(drafting_options().values() if drafting else ())]}


def family_flags(extra: list[str], drafting: bool = False) -> dict[str, str]:
    """The declared options among a command's extra arguments (`declared_flags`), as {name: text}:
    ``--NAME VALUE``, ``--NAME=VALUE`` or a bare bool ``--NAME`` (true). Anything else is a one-line error."""
    flags, out, i = declared_flags(drafting), {}, 0
    while i < len(extra):
        flag, sep, value = extra[i].partition("=")
        if flag not in flags:
            hint = did_you_mean(flag, flags) if flag.startswith("--") else ""
            raise JfbenchError(f"unexpected argument {extra[i]!r}: {hint}see --help for the options")
        bare = not sep and (i + 1 == len(extra) or extra[i + 1].startswith("--"))
        if bare and flags[flag].kind is not bool:
            raise JfbenchError(f"{flag} needs a value: {flags[flag].describe()}")
        if not sep and not bare:
            i += 1
            value = extra[i]
        out[flags[flag].name] = "true" if bare else value
        i += 1
    return out


def option_pairs(items: list[str] | None, flag: str) -> dict[str, str]:
    """``KEY=VALUE`` items; split at the last "=" so a variant name like ``head=bidirectional`` can be a key."""
    out = {}
    for item in items or []:
        key, sep, value = item.rpartition("=")
        if not sep or not key.strip() or not value.strip():
            raise JfbenchError(f"{flag} {item!r}: use {flag} NAME=VALUE")
        out[key.strip()] = value.strip()
    return out


def epilog(usage: str, drafting: str = "") -> str:
    """The help epilog: how family options are passed (``usage``), then each family's; with
    ``drafting`` (how they are passed), each drafter's drafting options too."""
    text = f"Family options ({usage}):\n\n{options_help()}"
    return f"{text}\n\nDrafting options ({drafting}):\n\n{drafting_help()}" if drafting else text
