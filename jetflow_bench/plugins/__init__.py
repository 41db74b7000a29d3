"""Drafter families: the `Family` record each one declares, and the one registry that holds them.

A family is the unit of plug-in: its drafting classes, its training objective, its recipe
options, its ablation axes, its export formats, its aliases and its plot colour, declared once in
its folder (``drafters/eagle/__init__.py``) and registered with one `register_family` line (the
built-ins in ``drafters/__init__.py``). Everything that looks a family up by a drafter's name —
the engine's arms, training, ablate, export, the report's palette — reads it here, below every
package that does so: shared code such as head training finds a family's objective without
importing the plug-in package.

A third party's package registers its record in the ``jfbench.families`` entry-point group (value
``"module:FAMILY"``, loaded with the built-ins: `load_family_entry_points`), or a bare drafter class
in the ``jfbench.drafters`` group (value ``"module:Class"``), as before families existed: it becomes a family of its own from the
class's ``training`` attribute and the old ``jfbench.recipes`` / ``jfbench.ablation_axes`` groups
(`legacy_family`). Nothing here imports torch or the training loop (`--help` reads it); an
objective is returned as loaded (a `training.objective.TrainingObjective`), untyped here so that
`training.config` imports this module without a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.registry import Registry, loaded
from jetflow_bench.plugins.ablation_axes import ABLATION_AXES, AblationAxes
from jetflow_bench.training.recipe import RECIPES, RecipeOption, declarations_help

if TYPE_CHECKING:
    from jetflow_bench.engine.drafter import Drafter


@dataclass(frozen=True)
class Family:
    """What one drafter family plugs in, declared once (torch-free: classes and objectives may be lazy)."""

    name: str  # the name its heads train under (`jfbench train --drafter NAME`, the recipe record's "drafter")
    drafters: Mapping[str, type | str]  # drafter name -> its `Drafter` class or "module:Class"; the family's own first
    training: Any = None  # its `TrainingObjective`, or "module:attr" naming one; None: nothing to train
    recipe: tuple[RecipeOption, ...] = ()  # its own recipe fields (`TrainConfig.options`), declared here only
    axes: AblationAxes = field(default_factory=AblationAxes)  # what `jfbench ablate` varies on its drafters
    exports: Mapping[str, str] = field(default_factory=dict)  # `jfbench export --format NAME` -> "module:function"
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # drafter name -> other names for it
    train_defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # drafter -> recipe fields its heads default to
    colour: str | None = None  # hex colour of the arm named like the family in every figure; None: hashed from the name

    def objective(self) -> Any:
        """Its `TrainingObjective` (loaded now if lazy); a usage error where it trains nothing."""
        if self.training is None:
            raise JfbenchError(
                f"--drafter {self.name!r} declares no training objective: train one of {', '.join(trainable_drafters())}"
            )
        return loaded(self.training)


# Family name -> its record, in registration order (the legend's order: oldest family first).
FAMILIES: Registry[Family] = Registry("drafter family", builtins="drafters")
# Drafter name -> its class: every family's drafters, and bare classes from the entry-point group.
DRAFTERS: Registry[type[Drafter]] = Registry("drafter", entry_point_group="jfbench.drafters", builtins="drafters")


def register_family(family: Family) -> Family:
    """Register ``family`` and its drafters (with their aliases) by name: the one line a family adds."""
    FAMILIES.register(family.name, family)
    for name, cls in family.drafters.items():
        DRAFTERS.register(name, cls, aliases=tuple(family.aliases.get(name, ())))
    return family


def load_family_entry_points() -> None:
    """Register every record named in the ``jfbench.families`` entry-point group (after the built-ins)."""
    for ep in entry_points(group="jfbench.families"):
        family = ep.load()
        if not isinstance(family, Family):
            raise JfbenchError(f"entry point {ep.name!r} = {ep.value!r} (group jfbench.families) is not a Family record: "
                               "point it at one (jetflow_bench.plugins.Family)")
        register_family(family)


def family_of(drafter: str) -> Family:
    """The family of the registered drafter ``drafter`` (or an alias of it)."""
    name = DRAFTERS.canonical(drafter)
    for family in FAMILIES.names():
        if name in FAMILIES.get(family).drafters:
            return FAMILIES.get(family)
    return legacy_family(name)


def legacy_family(drafter: str) -> Family:
    """The family of a drafter class registered on its own (entry point, `DRAFTERS.register`): its
    heads' name (``train_name``), its ``training`` attribute, and its declarations in the old
    ``jfbench.recipes`` / ``jfbench.ablation_axes`` groups (else its objective's ``options``)."""
    cls = DRAFTERS.get(drafter)
    train_name = getattr(cls, "train_name", None)
    name = train_name() if train_name is not None else drafter
    if name != drafter and name in FAMILIES:  # reads a registered family's heads
        return FAMILIES.get(name)
    training = getattr(cls, "training", None)
    recipe = tuple(RECIPES.get(name)) if name in RECIPES else tuple(getattr(loaded(training), "options", ()))
    axes = ABLATION_AXES.get(drafter) if drafter in ABLATION_AXES else AblationAxes()
    return Family(name, {drafter: cls}, training, recipe, axes,
                  train_defaults={drafter: dict(getattr(cls, "train_defaults", None) or {})})


def families() -> list[Family]:
    """Every family: the registered ones in registration order, then bare drafter classes' own."""
    registered = [FAMILIES.get(n) for n in FAMILIES.registered()]
    members = {d for f in registered for d in f.drafters}
    return registered + [legacy_family(d) for d in DRAFTERS.names() if d not in members]


def trains(drafter: str) -> bool:
    """Whether the drafter ``drafter``'s family declares a training objective (its heads train)."""
    return family_of(drafter).training is not None


def objective_for(drafter: str) -> tuple[str, Any]:
    """(family name, `TrainingObjective`) of the registered drafter ``drafter`` (or an alias of it);
    a family without one is a usage error naming the ones that have one."""
    family = family_of(drafter)
    return family.name, family.objective()


def recipe_defaults(drafter: str) -> dict[str, Any]:
    """Recipe fields heads trained for the arm ``drafter`` take unless given (jetflow-refine: the packed layout)."""
    return dict(family_of(drafter).train_defaults.get(DRAFTERS.canonical(drafter), {}))


def trainable_drafters() -> list[str]:
    """Families that declare a training objective, by the name their heads train under."""
    return sorted(f.name for f in families() if f.training is not None)


def family_options(drafter: str) -> tuple[RecipeOption, ...]:
    """The recipe fields of the family ``drafter``'s heads train under (none for an untrained drafter)."""
    return family_of(drafter).recipe


def axes_of(drafter: str) -> AblationAxes:
    """The ablation axes of ``drafter``'s family (empty where it declares none)."""
    return family_of(drafter).axes


def export_formats() -> dict[str, str]:
    """Every family's export formats: format name -> "module:function" writing it."""
    return {fmt: writer for f in families() for fmt, writer in f.exports.items()}


def family_colour(name: str) -> str | None:
    """The declared plot colour of the family named ``name`` (None: not a family, or none declared)."""
    return FAMILIES.get(name).colour if name in FAMILIES else None


def drafting_options() -> dict[str, RecipeOption]:
    """Drafting option name -> its declaration, over every family's axes (one may serve several)."""
    return {o.name: o for f in families() for o in f.axes.options}


def drafting_help() -> str:
    """Each drafter's drafting options, one line each (the `ablate` help epilog)."""
    return declarations_help({name: axes_of(name).options for name in DRAFTERS.names()})


def options_help() -> str:
    """Each family's recipe options, one line each (the `train` / `ablate` help epilog)."""
    return declarations_help({f.name: f.recipe for f in sorted(families(), key=lambda f: f.name)})
