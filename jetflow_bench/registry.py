"""One generic registry for every plug-in kind (drafters, suites).

Entries are either objects or lazy ``"module:attr"`` strings, so heavy backends import only when
chosen. Third-party packages add entries through an entry-point group (``jfbench.drafters``,
``jfbench.suites``). Built-ins are always registered, so a plug-in never hides them.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar

from jetflow_bench.errors import JfbenchError

T = TypeVar("T")


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
            choices = sorted(self._entries) + sorted(self._aliases)
            close = difflib.get_close_matches(key, choices, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise JfbenchError(
                f"unknown {self.kind} {name!r}: {hint}choose one of {', '.join(sorted(self._entries))}"
            )
        return key

    def get(self, name: str) -> T:
        """The plug-in registered under ``name`` (importing it now if it was lazy)."""
        key = self.canonical(name)
        entry = self._entries[key]
        if isinstance(entry, str):
            module_name, _, attr = entry.partition(":")
            entry = getattr(importlib.import_module(module_name), attr)
            self._entries[key] = entry
        return entry  # type: ignore[return-value]

    def names(self) -> list[str]:
        self._load_entry_points()
        return sorted(self._entries)

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
