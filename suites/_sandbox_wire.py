"""The messages between the sandbox's judge and the program's process: plain data, strictly decoded.

Both ends load this file by path (they run as ``python -I`` scripts and import only the standard
library). One message is one line of JSON; every value travels tagged, so the judge rebuilds it
from built-in types only — an object of the program's own making never reaches the judge, and with
it no ``__eq__`` the program wrote. Values that are not plain data travel as handles (an index
into the program process's table of objects), which the judge may call, read attributes of, set
attributes on or pass back, but never compare by value. A handle carries the object's truth value, computed where it lives: the program
chooses it as freely as it chooses to return True or False, so it grants nothing more.

Wire values, by tag: ``n`` None, ``b`` bool, ``i`` int, ``f`` float, ``c`` complex, ``s`` str,
``y`` bytes (latin-1), ``l`` list, ``t`` tuple, ``S`` set, ``F`` frozenset, ``d`` dict (key/value
pairs), ``B`` a built-in type or function (by name), ``it`` an iterator (materialised; the judge gets ``iter(list)``), ``m`` a module (by name),
``h`` a handle (index, type name, truth value or null).
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable, Iterator
from itertools import islice
from types import ModuleType
from typing import Any, BinaryIO

MAX_MESSAGE_BYTES = 32 * 2**20  # one line; a longer one is a protocol error, not a crash
MAX_DEPTH = 200  # nesting of one value
MAX_ITEMS = 1_000_000  # elements taken from an iterator the program returns


class ProtocolError(Exception):
    """The other side sent something that is not a well-formed message."""


def encode(value: Any, handle: Callable[[Any], list], depth: int = 0) -> list:
    """``value`` as a tagged JSON-able list; ``handle(value)`` stands in for anything else."""
    if depth > MAX_DEPTH:
        raise ValueError(f"value nested deeper than {MAX_DEPTH}")
    deeper = depth + 1
    if value is None:
        return ["n"]
    if isinstance(value, bool):
        return ["b", bool(value)]
    if isinstance(value, int):
        return ["i", int(value)]
    if isinstance(value, float):
        return ["f", float(value)]
    if isinstance(value, complex):
        return ["c", [value.real, value.imag]]
    if isinstance(value, str):
        return ["s", str(value)]
    if isinstance(value, bytes | bytearray):
        return ["y", bytes(value).decode("latin-1")]
    for kind, tag in ((list, "l"), (tuple, "t"), (set, "S"), (frozenset, "F")):
        if isinstance(value, kind):
            return [tag, [encode(v, handle, deeper) for v in value]]
    if isinstance(value, dict):
        return ["d", [[encode(k, handle, deeper), encode(v, handle, deeper)] for k, v in value.items()]]
    if isinstance(value, ModuleType):
        return ["m", str(value.__name__)]
    if _builtin_name(value) is not None:
        return ["B", _builtin_name(value)]
    if isinstance(value, Iterator):
        return ["it", [encode(v, handle, deeper) for v in islice(value, MAX_ITEMS)]]
    return handle(value)


def _builtin_name(value: Any) -> str | None:
    """``"int"`` for ``int`` and so on: built-in types and functions travel by name."""
    name = getattr(value, "__name__", None)
    return name if isinstance(name, str) and getattr(builtins, name, None) is value else None


_SCALARS: dict[str, tuple[type, ...]] = {"b": (bool,), "i": (int,), "f": (float, int), "s": (str,), "y": (str,)}
_SEQUENCES: dict[str, Callable[[list], Any]] = {"l": list, "t": tuple, "S": set, "F": frozenset, "it": iter}


def decode(wire: Any, handle: Callable[[int, str, bool | None], Any], module: Callable[[str], Any], depth: int = 0) -> Any:
    """The value ``wire`` stands for, built from built-in types; raises `ProtocolError` if malformed."""
    if depth > MAX_DEPTH or not isinstance(wire, list) or not wire or not isinstance(wire[0], str):
        raise ProtocolError(f"not a wire value: {str(wire)[:80]}")
    tag, body = wire[0], wire[1:]
    try:
        if tag == "n" and not body:
            return None
        if tag in _SCALARS and len(body) == 1 and type(body[0]) in _SCALARS[tag]:
            return body[0].encode("latin-1") if tag == "y" else float(body[0]) if tag == "f" else body[0]
        if tag == "c" and len(body) == 1 and isinstance(body[0], list) and len(body[0]) == 2:
            return complex(*(float(x) for x in body[0]))
        if tag in _SEQUENCES and len(body) == 1 and isinstance(body[0], list):
            return _SEQUENCES[tag]([decode(v, handle, module, depth + 1) for v in body[0]])
        if tag == "d" and len(body) == 1 and isinstance(body[0], list):
            return {decode(k, handle, module, depth + 1): decode(v, handle, module, depth + 1) for k, v in body[0]}
        if tag == "B" and len(body) == 1 and isinstance(body[0], str) and hasattr(builtins, body[0]):
            return getattr(builtins, body[0])
        if tag == "m" and len(body) == 1 and isinstance(body[0], str):
            return module(body[0])
        if tag == "h" and len(body) == 3 and type(body[0]) is int and isinstance(body[1], str) and (
            body[2] is None or type(body[2]) is bool
        ):
            return handle(body[0], body[1], body[2])
    except (TypeError, ValueError, UnicodeError) as err:  # unhashable set item or dict key, bad pair
        raise ProtocolError(f"malformed {tag!r} value: {err}") from None
    raise ProtocolError(f"malformed wire value with tag {tag!r}")


def send(stream: BinaryIO, message: list) -> None:
    stream.write(json.dumps(message).encode() + b"\n")
    stream.flush()


def receive(stream: BinaryIO) -> list | None:
    """The next message, or None at end of stream."""
    line = stream.readline(MAX_MESSAGE_BYTES + 1)
    if not line:
        return None
    if not line.endswith(b"\n"):
        raise ProtocolError(f"message longer than {MAX_MESSAGE_BYTES} bytes or cut off")
    try:
        message = json.loads(line)
    except (ValueError, RecursionError) as err:
        raise ProtocolError(f"not JSON: {err}") from None
    if not isinstance(message, list) or not message or not isinstance(message[0], str):
        raise ProtocolError(f"not a message: {line[:80]!r}")
    return message
