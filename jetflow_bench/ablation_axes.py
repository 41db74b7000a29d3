"""What a drafter declares for `jfbench ablate`: its drafting axes and the settings a variant forces.

A drafter's *drafting options* are build options `ablate` varies on the base's own head
(``--refine-passes 0,2``), declared as `RecipeOption`s like a family's recipe fields; the command
reads them generically (`jetflow_bench.cli.recipe_flags`) and lists them in its help. Its
*common settings* say which variant value the base's own setting cannot run with and the nearest
setting both arms can (a bidirectional head cannot train on the packed layout): `ablate` then runs
both arms at that setting (`sweep.ablation.one_factor`). The built-ins register in `drafters`
(``drafters/axes.py``), third parties through the ``jfbench.ablation_axes`` entry-point group; no
model library is imported here: `--help` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jetflow_bench.registry import Registry
from jetflow_bench.training.recipe import RecipeOption, declarations_help


@dataclass(frozen=True)
class CommonSetting:
    """A variant the base's own setting cannot run with, and the setting both arms run at instead."""

    factor: tuple[str, Any]  # the variant's (key, value), e.g. ("head", "bidirectional")
    stage: str  # "train": a recipe field of the head (other weights) | "infer": a build option
    key: str  # the setting both arms take, e.g. "layout"
    value: Any  # its value, e.g. "prefix"
    why: str  # said in the notes and the table's held_fixed column
    conflicts: tuple[Any, ...] = ()  # the base's values the variant cannot run with; empty: any but ``value``

    def needed(self, base_value: Any) -> bool:
        """Whether a base at ``base_value`` (None: unknown) must move to ``value`` for this variant."""
        if base_value in (None, self.value):
            return False
        return not self.conflicts or base_value in self.conflicts


@dataclass(frozen=True)
class AblationAxes:
    """One drafter's declaration for `jfbench ablate`."""

    options: tuple[RecipeOption, ...] = ()  # build options varied as --NAME V1,V2 on the base's own head
    common: tuple[CommonSetting, ...] = ()


# Drafter name -> its `AblationAxes` (lazy "module:attr"); a drafter that registers none has none.
ABLATION_AXES: Registry[AblationAxes] = Registry(
    "ablation axes", entry_point_group="jfbench.ablation_axes", builtins="drafters"
)


def axes_of(drafter: str) -> AblationAxes:
    """The declaration of ``drafter`` (canonical name); empty where it declares none."""
    return ABLATION_AXES.get(drafter) if drafter in ABLATION_AXES else AblationAxes()


def drafting_options() -> dict[str, RecipeOption]:
    """Option name -> its declaration, over every registered drafter (one may serve several)."""
    return {o.name: o for name in ABLATION_AXES.names() for o in ABLATION_AXES.get(name).options}


def drafting_help() -> str:
    """Each drafter's drafting options, one line each (the `ablate` help epilog)."""
    return declarations_help({name: ABLATION_AXES.get(name).options for name in ABLATION_AXES.names()})
