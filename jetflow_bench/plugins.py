"""The drafter registry, below every package that looks drafters up by name, and the lookups of a
family's training objective through it.

The `drafters` package registers its built-ins into it (and third parties join through the
``jfbench.drafters`` entry-point group); the registry imports `drafters` before its first lookup,
so shared code such as head training (`jetflow_bench.training`) finds a family's objective by
name without importing the plug-in package. Nothing here imports torch or the training package:
an objective is returned as loaded (`training.objective.TrainingObjective`), untyped here so that
`training.config` can import this module without a cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jetflow_bench.errors import JfbenchError
from jetflow_bench.registry import Registry, load_attr

if TYPE_CHECKING:
    from jetflow_bench.engine.drafter import Drafter

DRAFTERS: Registry[type[Drafter]] = Registry("drafter", entry_point_group="jfbench.drafters", builtins="drafters")


def _family_of(drafter_cls: type) -> str:
    """The name its heads are trained under (a drafter reading another family's heads says so: ``train_name``)."""
    train_name = getattr(drafter_cls, "train_name", None)
    return train_name() if train_name is not None else drafter_cls.name


def trains(drafter: str) -> bool:
    """Whether the registered drafter ``drafter`` declares a training objective (its heads train)."""
    return getattr(DRAFTERS.get(drafter), "training", None) is not None


def objective_for(drafter: str) -> tuple[str, Any]:
    """(family name, `TrainingObjective`) of the registered drafter ``drafter`` (or an alias of it).

    A drafter without a ``training`` objective is a usage error naming the ones that have one.
    """
    drafter_cls = DRAFTERS.get(drafter)
    hook = getattr(drafter_cls, "training", None)
    if hook is None:
        raise JfbenchError(
            f"--drafter {drafter!r} declares no training objective: train one of {', '.join(trainable_drafters())}"
        )
    if isinstance(hook, str):
        hook = load_attr(hook)
    return _family_of(drafter_cls), hook


def recipe_defaults(drafter: str) -> dict[str, Any]:
    """Recipe fields heads trained for the arm ``drafter`` take unless given (`LearnedDrafter.train_defaults`)."""
    return dict(getattr(DRAFTERS.get(drafter), "train_defaults", None) or {})


def trainable_drafters() -> list[str]:
    """Registered drafter families that declare a training objective (arms reading another family's heads left out)."""
    out = []
    for name in DRAFTERS.names():
        drafter_cls = DRAFTERS.get(name)
        if trains(name) and _family_of(drafter_cls) == name:
            out.append(name)
    return out


def family_options(drafter: str) -> tuple[Any, ...]:
    """The recipe fields (`RecipeOption`s) of the family ``drafter``'s heads train under (none for an untrained drafter)."""
    return objective_for(drafter)[1].options if trains(drafter) else ()
