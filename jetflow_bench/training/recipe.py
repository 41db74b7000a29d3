"""Recipe fields a drafter family declares for its own heads: `RecipeOption`.

Shared fields (steps, lr, decay, ...) live on `TrainConfig`; a family's own ones (EAGLE's
``ttt_steps``, the block heads' ``layout``) are declared once, as a tuple of `RecipeOption` on
its record (`jetflow_bench.plugins.Family.recipe`). `TrainConfig` carries the values as
the family's options; `jfbench train` and `jfbench ablate` accept each one as ``--NAME VALUE`` or
``--option NAME=VALUE``. This module imports no model library: `--help` reads it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.registry import Registry, did_you_mean

# Family name -> its tuple of `RecipeOption`, from the old ``jfbench.recipes`` entry-point group only
# (a family bare of a record, `jetflow_bench.plugins.legacy_family`).
RECIPES: Registry[tuple[RecipeOption, ...]] = Registry("training recipe", entry_point_group="jfbench.recipes")
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


@dataclass(frozen=True)
class RecipeOption:
    """One declared option of a plug-in — a family's recipe field, or a drafter's drafting option
    (`jetflow_bench.plugins.ablation_axes`): its name, type, default, allowed values and help."""

    name: str  # the `TrainConfig.options` key (or the build option); on the command line --NAME with "_" -> "-"
    kind: type  # bool, int, float or str
    default: Any  # None: "the family decides" (its `TrainingObjective.settings` resolves it)
    help: str
    choices: tuple[Any, ...] = ()  # allowed values (empty: any of ``kind``)
    minimum: float | None = None  # smallest allowed number
    maximum: float | None = None  # largest allowed number

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def parse(self, value: Any) -> Any:
        """``value`` (command-line text or a Python value) as this field's type, checked; a bad one
        is a one-line `JfbenchError` naming the flag and what it accepts."""
        if value is None:
            return None
        try:
            if self.kind is bool and isinstance(value, str):
                if value.strip().lower() not in (*_TRUE, *_FALSE):
                    raise ValueError(value)
                parsed: Any = value.strip().lower() in _TRUE
            elif self.kind is bool and not isinstance(value, bool):
                raise ValueError(value)
            else:
                parsed = self.kind(value)
            if self.kind is int and isinstance(value, float) and value != parsed:
                raise ValueError(value)
        except ValueError:
            raise JfbenchError(f"{self.flag} {value!r} is not a valid {self.kind.__name__}: {self.describe()}") from None
        if self.choices and parsed not in self.choices:
            raise JfbenchError(f"{self.flag} {value!r} is unknown: choose one of {', '.join(map(str, self.choices))}")
        if self.minimum is not None and parsed < self.minimum:
            raise JfbenchError(f"{self.flag} {value!r} must be at least {self.minimum:g}")
        if self.maximum is not None and parsed > self.maximum:
            raise JfbenchError(f"{self.flag} {value!r} must be at most {self.maximum:g}")
        return parsed

    def describe(self) -> str:
        """One help line: the flag, its values, default and meaning."""
        values = "|".join(map(str, self.choices)) if self.choices else self.kind.__name__.upper()
        if self.minimum is not None:
            values += f" >= {self.minimum:g}"
        if self.maximum is not None:
            values += f" <= {self.maximum:g}"
        default = "" if self.default is None else f" (default {self.default!r})"  # None: the help says what decides
        return f"{self.flag} {values}{default}: {self.help}"


def resolve_options(family: str, declared: Iterable[RecipeOption], given: Mapping[str, Any]) -> dict[str, Any]:
    """Every declared field of ``family`` with its value from ``given`` (parsed, checked) or its
    default; a name the family does not declare is a one-line error listing the ones it does."""
    fields = {o.name: o for o in declared}
    for name in given:
        if name not in fields:
            flags = [o.flag for o in fields.values()]
            flag = "--" + name.replace("_", "-")
            raise JfbenchError(f"{flag} is not a training option of {family}: {did_you_mean(flag, flags)}"
                               f"its own options are {', '.join(flags) or 'none'}")
    return {name: option.parse(given[name]) if name in given else option.default for name, option in fields.items()}


def declarations_help(declared: Mapping[str, tuple[RecipeOption, ...]]) -> str:
    """One help line per distinct declaration: the plug-ins sharing it, then its options."""
    owners: dict[tuple[RecipeOption, ...], list[str]] = {}  # plug-ins sharing one declaration listed together
    for name, options in declared.items():
        owners.setdefault(options, []).append(name)
    return "\n\n".join(f"{', '.join(names)}: " + "; ".join(o.describe() for o in options)
                       for options, names in owners.items() if options)
