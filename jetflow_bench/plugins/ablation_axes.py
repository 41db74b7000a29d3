"""What a drafter declares for `jfbench ablate`: its drafting axes and the settings a variant forces.

A drafter's *drafting options* are build options `ablate` varies on the base's own head
(``--refine-passes 0,2``), declared as `RecipeOption`s like a family's recipe fields; the command
reads them generically (`jetflow_bench.cli.recipe_flags`) and lists them in its help. Its
*common settings* say which variant value the base's own setting cannot run with and the nearest
setting both arms can (a bidirectional head cannot train on the packed layout): `ablate` then runs
both arms at that setting (`sweep.ablation.one_factor`). A family declares them on its record
(`jetflow_bench.plugins.Family`; the built-ins' shared ones are in ``drafters/axes.py``); no
model library is imported here: `--help` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jetflow_bench.core.registry import Registry
from jetflow_bench.training.recipe import RecipeOption


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


# Drafter name -> its `AblationAxes`, from the old ``jfbench.ablation_axes`` entry-point group only:
# a family declares its axes on its record (`jetflow_bench.plugins.Family.axes`).
ABLATION_AXES: Registry[AblationAxes] = Registry("ablation axes", entry_point_group="jfbench.ablation_axes")
