"""The drafter registry, below every package that looks drafters up by name.

The `drafters` package registers its built-ins into it (and third parties join through the
``jfbench.drafters`` entry-point group); the registry imports `drafters` before its first lookup,
so shared code such as head training (`jetflow_bench.training`) finds a family's objective by
name without importing the plug-in package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jetflow_bench.registry import Registry

if TYPE_CHECKING:
    from drafters.base import Drafter

DRAFTERS: Registry[type[Drafter]] = Registry("drafter", entry_point_group="jfbench.drafters", builtins="drafters")
