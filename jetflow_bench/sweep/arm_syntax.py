"""How an arm is written on the command line: ``NAME[KEY=VALUE,...]=CHECKPOINT_DIR``, a list of them
split at commas outside brackets, and the syntax check of a name (``ENGINE:METHOD`` names another
engine's arm, so this reads the engine registry: the grid module stays free of it).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from jetflow_bench.core.arms import AR_ARM, ARM_SYNTAX
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.sweep.engines import ENGINES
from jetflow_bench.sweep.grid import parse_value

_DRAFTER_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]*")


def check_drafter_name(name: str, item: str, option: str) -> None:
    """A malformed arm (``ngram:max_ngram=3``) is a syntax error, not a checkpoint that is missing.

    ``ENGINE:METHOD`` names another engine's arm (``vllm:ngram``, `--engine vllm`).
    """
    if _DRAFTER_NAME.fullmatch(name):
        return
    engine, colon, method = name.partition(":")
    if colon and engine.lower() in ENGINES.names() and _DRAFTER_NAME.fullmatch(method):
        return
    base, colon, rest = item.partition(":")
    hint = f"; did you mean {base.strip()}[{rest.strip()}]?" if colon and base.strip() and rest.strip() else ""
    raise JfbenchError(f"{option} {item!r}: {name!r} is not a drafter name{hint} (write {ARM_SYNTAX})")


_ARM = re.compile(r"^\s*([^\[\]=]+?)\s*(?:\[([^\[\]]*)\])?\s*(?:=(.*))?$")


def split_arms(text: str, option: str) -> list[str]:
    """Split at commas outside brackets: 'eagle[depth=15,top_k=4]=D,ngram' -> 2 items."""
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth not in (0, 1):
            raise JfbenchError(f"{option} {text!r}: unbalanced brackets; write {ARM_SYNTAX}")
        if char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    items = [item.strip() for item in items if item.strip()]
    if depth or not items:
        raise JfbenchError(f"{option} {text!r}: name at least one drafter as {ARM_SYNTAX}")
    return items


def parse_drafters(text: str, option: str = "--drafters") -> list[tuple[str, dict[str, Any], Path | None]]:
    """Drafter arms -> (name, options, checkpoint); names are not yet resolved, options not yet checked.

    Example: 'ngram,eagle[depth=15,top_k=4]=DIR' -> [("ngram", {}, None),
    ("eagle", {"depth": 15, "top_k": 4}, Path(DIR).resolve())].
    """
    out: list[tuple[str, dict[str, Any], Path | None]] = []
    for item in split_arms(text, option):
        match = _ARM.match(item)
        if match is None:
            raise JfbenchError(f"{option} {item!r}: write {ARM_SYNTAX}")
        name, inside, path = match.group(1).strip(), match.group(2), (match.group(3) or "").strip()
        check_drafter_name(name, item, option)
        if name.lower() == AR_ARM:
            raise JfbenchError(f"{option}: the AR baseline {AR_ARM!r} is always run; list only drafters")
        options: dict[str, Any] = {}
        for pair in (p.strip() for p in (inside or "").split(",") if p.strip()):
            key, sep, value = pair.partition("=")
            if not sep or not key.strip() or not value.strip():
                raise JfbenchError(f"{option} {item!r}: options are KEY=VALUE, e.g. eagle[depth=15]")
            options[key.strip()] = parse_value(value)
        checkpoint = Path(path).expanduser().resolve() if path else None
        if checkpoint is not None and not checkpoint.exists():
            raise JfbenchError(f"{option} {item!r}: checkpoint {checkpoint} does not exist")
        out.append((name, options, checkpoint))
    return out
