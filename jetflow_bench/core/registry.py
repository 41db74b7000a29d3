"""One generic registry for every plug-in kind (drafters, suites, engines), and the two helpers every
name lookup shares: `load_attr` (a lazy ``"module:attr"``) and `did_you_mean` (the hint for an
unknown name).

Entries are either objects or lazy ``"module:attr"`` strings, so heavy backends import only when
chosen. Third-party packages add entries through an entry-point group (``jfbench.drafters``,
``jfbench.suites``). Built-ins are always registered, so a plug-in never hides them.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable, Iterator
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from jetflow_bench.core.errors import JfbenchError

T = TypeVar("T")


def load_attr(spec: str) -> Any:
    """The object a ``"module:attr"`` string names, importing its module now."""
    module_name, _, attr = spec.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def loaded(entry: Any) -> Any:
    """``entry`` itself, or the object it names when it is a lazy ``"module:attr"`` string."""
    return load_attr(entry) if isinstance(entry, str) else entry


def close_names(name: str, choices: Iterable[str], n: int = 1, cutoff: float = 0.6) -> list[str]:
    """Up to ``n`` known names close to ``name`` (difflib's ratio >= ``cutoff``), closest first."""
    return difflib.get_close_matches(name, list(choices), n=n, cutoff=cutoff)


def did_you_mean(name: str, choices: Iterable[str], shown: str = "{!r}") -> str:
    """"did you mean 'x'? " for the known name closest to ``name`` (``shown`` formats it), else ""."""
    close = close_names(name, choices)
    return f"did you mean {shown.format(close[0])}? " if close else ""


class Registry(Generic[T]):
    """Name -> plug-in, with aliases, lazy imports, duplicate checks and "did you mean"."""

    def __init__(self, kind: str, entry_point_group: str | None = None, builtins: str | None = None) -> None:
        self.kind = kind  # e.g. "drafter"; used in error messages
        self.entry_point_group = entry_point_group
        # The module that registers the built-ins, imported before the first lookup: code below the
        # plug-in package (training) finds plug-ins by name without importing that package.
        self.builtins = builtins
        self._entries: dict[str, T | str] = {}
        self._aliases: dict[str, str] = {}
        self._entry_points_loaded = False

    def register(self, name: str, obj: T | str | None = None, *, aliases: tuple[str, ...] = ()):
        """Register ``obj`` (or a lazy "module:attr" string) under ``name``; usable as a decorator."""

        def add(target: T | str) -> T | str:
            for key in (name, *aliases):
                if key in self._entries or key in self._aliases:
                    raise ValueError(f"{self.kind} {key!r} is already registered")
            self._entries[name] = target
            for alias in aliases:
                self._aliases[alias] = name
            return target

        return add(obj) if obj is not None else add

    def _load_entry_points(self) -> None:
        if self.builtins is not None:
            importlib.import_module(self.builtins)
        if self._entry_points_loaded or self.entry_point_group is None:
            return
        self._entry_points_loaded = True
        for ep in entry_points(group=self.entry_point_group):
            key = ep.name.strip().lower()
            taken = self._entries.get(key, self._aliases.get(key))
            if taken is not None:
                source = f" of package {ep.dist.name!r}" if ep.dist is not None else ""
                raise JfbenchError(
                    f"entry point {ep.name!r} = {ep.value!r}{source} (group {self.entry_point_group}) clashes "
                    f"with the registered {self.kind} {key!r} = {_describe(taken)}: rename the entry point"
                )
            self._entries[key] = ep.value

    def canonical(self, name: str) -> str:
        """The registered name for ``name`` or an alias of it; unknown names raise with suggestions."""
        self._load_entry_points()
        key = name.strip().lower()
        key = self._aliases.get(key, key)
        if key not in self._entries:
            hint = did_you_mean(key, sorted(self._entries) + sorted(self._aliases))
            raise JfbenchError(
                f"unknown {self.kind} {name!r}: {hint}choose one of {', '.join(sorted(self._entries))}"
            )
        return key

    def get(self, name: str) -> T:
        """The plug-in registered under ``name`` (importing it now if it was lazy)."""
        key = self.canonical(name)
        entry = self._entries[key] = loaded(self._entries[key])
        return entry  # type: ignore[return-value]

    def names(self) -> list[str]:
        self._load_entry_points()
        return sorted(self._entries)

    def registered(self) -> list[str]:
        """The names in the order they were registered (built-ins first, then entry points)."""
        self._load_entry_points()
        return list(self._entries)

    def __contains__(self, name: str) -> bool:
        try:
            self.canonical(name)
        except JfbenchError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def describe(self) -> dict[str, Any]:
        return {name: self._entries[name] for name in self.names()}


def _describe(entry: object) -> str:
    """How an error names a registered entry: its "module:attr" string or its qualified name."""
    if isinstance(entry, str):
        return repr(entry)
    return repr(f"{getattr(entry, '__module__', '?')}:{getattr(entry, '__qualname__', entry)}")
