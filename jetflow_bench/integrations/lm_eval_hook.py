"""Registers the ``jfbench`` model with lm-evaluation-harness releases that have no plug-in discovery.

lm-eval 0.4.13 (the newest release) resolves ``--model NAME`` only against its own registry, and
nothing outside it runs before that lookup. So the wheel of this package carries a one-line
``jetflow_bench_lm_eval.pth`` (Python runs ``.pth`` import lines at start-up) that calls
`install`: a meta-path hook that waits until ``lm_eval.api.registry`` has been imported and then
registers ``jfbench`` as a lazy ``"module:Class"`` entry, so nothing heavy is imported unless the
model is chosen. Harness versions that read the ``lm_eval.models`` entry-point group (declared in
pyproject.toml) find the model without this hook; where the name is already registered it does
nothing. Start-up cost in other processes: this module, no third-party import.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from types import ModuleType

WATCHED = "lm_eval.api.registry"
MODEL = ("jfbench", "jetflow_bench.integrations.lm_eval:JfbenchLM")


def register(registry: ModuleType) -> None:
    """Add ``jfbench`` to the harness's model registry, built-in models first."""
    import lm_eval.models  # noqa: F401  (the harness loads its built-ins only into an empty registry)

    name, target = MODEL
    if name not in registry.model_registry:
        registry.model_registry.register(name, target=target)


class _RegisterAfterExec(importlib.abc.Loader):
    """Runs the real loader, then `register`."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        register(module)

    def __getattr__(self, name: str):  # get_source, get_filename, ... for tracebacks and inspect
        return getattr(self.loader, name)


class _Watcher(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != WATCHED:
            return None
        sys.meta_path.remove(self)  # one use; and the lookup below must not find this finder
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisterAfterExec(spec.loader)
        return spec


def install() -> None:
    """Register now if the harness is already imported, else when it is."""
    if WATCHED in sys.modules:
        register(sys.modules[WATCHED])
    elif not any(isinstance(finder, _Watcher) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Watcher())
