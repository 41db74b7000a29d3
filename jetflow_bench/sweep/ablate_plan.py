"""From `jfbench ablate`'s flags to the arms it runs: the plan of one ablation.

The command hands its flags over as text. `plan_ablation` reads the base arm (variant "default"),
turns every variant flag into values of an axis (`ablation.variants`), moves a variant the base's
own setting cannot run with to the nearest common setting (`ablation.one_factor`) and copies the
arms per head seed (`ablation.with_seeds`). Once the grid is resolved, `AblationPlan.with_heads`
gives every arm its head: given with --checkpoint, the base's, or trained on demand (cached by
recipe), and `AblationPlan.derived` is the ablation table the run writes beside its summary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jetflow_bench.core.arms import DEFAULT_VARIANT
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.plugins import axes_of, drafting_options, family_options, trains
from jetflow_bench.sweep.ablation import (
    TRAIN_AXES,
    Comparison,
    HeadTrainer,
    ablation_table,
    one_factor,
    trained_recipe,
    variants,
    with_checkpoints,
    with_seeds,
)
from jetflow_bench.sweep.arm_syntax import parse_drafters
from jetflow_bench.sweep.arms import arm_spec, check_option_names, option_defaults, other_target_heads
from jetflow_bench.sweep.grid import (
    DrafterSpec,
    SweepConfig,
    parse_ints,
    parse_names,
    parse_value,
)
from jetflow_bench.sweep.store import Derived


@dataclass(frozen=True)
class AblationPlan:
    """The arms of one ablation and what each variant is compared with."""

    base: DrafterSpec  # the base arm, variant "default"
    specs: tuple[DrafterSpec, ...]  # the base, its variants, reference arms and seed copies (heads not yet filled in)
    comparisons: dict[str, Comparison]  # variant -> the arm it is measured against
    recipe: dict[str, Any]  # --train-option fields, on top of the base head's recipe, for heads trained here

    @property
    def notes(self) -> tuple[str, ...]:
        """One line per variant: what it is compared with and at which setting (stderr, manifest)."""
        return tuple(c.note(self.base.full_label) for c in self.comparisons.values())

    @property
    def extra(self) -> tuple[tuple[str, Any], ...]:
        """The ablation's record in the config (and so the manifest): its comparisons, and the other
        target every head was trained on where it is a transfer (`pinned`; `jfbench show` says so)."""
        transfer = sorted({c.other_target for c in self.comparisons.values()} - {""})
        return (("ablation", True), ("comparisons", self.notes), *(("other_target", fp) for fp in transfer))

    def with_heads(self, config: SweepConfig, given: Mapping[str, Path], data_dir: Path | None) -> SweepConfig:
        """``config`` with every arm's head filled in (`ablation.with_checkpoints`), heads trained for
        the config's target, device and dtype."""
        specs = with_checkpoints(self.specs, given, head_trainer(data_dir, config), self.recipe)
        return dataclasses.replace(config, drafters=tuple(specs))

    def pinned(self, config: SweepConfig, given: Mapping[str, Path], allow_other_target: bool) -> AblationPlan:
        """The plan with every head checked against the config's target before any is trained
        (`arms.other_target_heads`). A deliberate transfer keeps every variant's name (the base stays
        "default") and is held fixed in every comparison, so every head must come from the one other
        target: a variant trained here on demand, or given from a third target, would change two factors."""
        specs = [dataclasses.replace(s, checkpoint=str(given[s.variant])) if s.variant in given else s
                 for s in config.drafters]
        moved = other_target_heads(specs, config.target, allow_other_target, "--allow-other-target")
        if not moved:
            return self
        source, *others = sorted(set(moved.values()))
        here = [s.label for s in specs if s.label not in moved]  # a learned family: every arm has a head or trains one
        if here or others:
            odd = here[0] if here else next(label for label, fp in moved.items() if fp != source)
            raise JfbenchError(
                f"--allow-other-target: {odd}'s head is not from target {source} like {next(iter(moved))}'s, so its "
                f"delta would change two factors: give it a head trained on {source} (--checkpoint VARIANT=DIR)"
            )
        comparisons = {k: dataclasses.replace(c, other_target=source) for k, c in self.comparisons.items()}
        return dataclasses.replace(self, comparisons=comparisons)

    def derived(self, config: SweepConfig) -> Derived:
        """The ablation table, derived from the run's requests (paired bootstrap with the run's seed)."""
        return {"ablation": lambda requests: ablation_table(requests, config.n_boot, config.seed, self.comparisons)}


def plan_ablation(
    drafter: str, flags: Mapping[str, str], options: Mapping[str, str], train_options: Mapping[str, str],
    seeds: str | None,
) -> AblationPlan:
    """The plan of ``ablate --drafter DRAFTER`` with variant ``flags`` ({name: "V1,V2"}: `TRAIN_AXES`,
    the base family's recipe fields and the drafters' drafting options), generic ``options``
    (--option KEY=V1,V2), ``train_options`` (--train-option KEY=VALUE) and head ``seeds``
    ("0,1,2"). Every value is checked here, before any model loads."""
    from jetflow_bench.training.config import canonical_head
    from jetflow_bench.training.recipe import resolve_options

    parsed = parse_drafters(drafter, "--drafter")
    if len(parsed) != 1:
        raise JfbenchError(f"--drafter {drafter!r}: ablate one base drafter at a time, e.g. --drafter jetflow=DIR")
    ((name, base_options, ckpt),) = parsed
    base = arm_spec(name, base_options, ckpt, variant=DEFAULT_VARIANT)
    drafting = drafting_options()
    own = {o.name for o in family_options(base.name)}
    recipe_flags = [k for k in flags if k not in TRAIN_AXES and k not in drafting]
    resolve_options(base.name, family_options(base.name), dict.fromkeys(recipe_flags))  # refuses another family's fields
    generic = {k: _values(f"--option {k}", v) for k, v in options.items()}
    clash = sorted(set(generic) & {*TRAIN_AXES, *drafting, *own})
    if clash:
        raise JfbenchError(f"--option {clash[0]}: use its own flag (--{clash[0].replace('_', '-')}) instead")
    check_option_names(base.name, [*generic, *(k for k in flags if k in drafting)])
    axes = {k: [drafting[k].parse(v) for v in parse_names(text, drafting[k].flag)] if k in drafting
            else _values(f"--{k.replace('_', '-')}", text) for k, text in flags.items()}
    if "head" in axes:  # one name per head mode, so variants and their common settings match
        axes["head"] = [canonical_head(v) for v in axes["head"]]
    recipe = {k: parse_value(v) for k, v in train_options.items()}
    specs, comparisons = one_factor(variants(base, axes, generic), base_settings(base, recipe))
    if seeds is not None:
        own_seed = int({**trained_recipe(base.checkpoint), **recipe}.get("seed", 0))
        learned = trains(base.name)
        if not learned or (base.checkpoint and not trained_recipe(base.checkpoint)):
            raise JfbenchError(f"--seeds: {base.full_label} has no jfbench training recipe to re-train with other seeds; "
                               "pass a head made by `jfbench train`")
        specs = with_seeds(specs, parse_ints(seeds, "--seeds", minimum=0), own_seed)
    return AblationPlan(base, tuple(specs), comparisons, recipe)


def _values(flag: str, text: str) -> list[Any]:
    """One axis's values, each read as a number or bool where it is one: "0,2" -> [0, 2]."""
    return [parse_value(v) for v in parse_names(text, flag)]


def head_trainer(data_dir: Path | None, config: SweepConfig) -> HeadTrainer:
    """Heads trained on demand (cached by recipe) for the sweep's target, device and dtype."""

    def train(drafter: str, recipe: dict) -> Path | None:
        from jetflow_bench.training import ensure_head

        if not trains(drafter):
            return None
        return ensure_head(config.target, drafter, data_dir=data_dir, device=config.device, dtype=config.dtype,
                           threads=config.threads, **recipe)  # jetflow-refine trains (and caches) a jetflow head

    return train


def base_settings(base: DrafterSpec, recipe: dict[str, Any]) -> dict[str, Any]:
    """The base arm's effective value of each setting its drafter's common settings name (None
    where unknown): a recipe field as its family resolves it for the base's head, a build option as
    the arm sets it, else the drafter's default. Example: jetflow -> {"layout": "packed", "refine_passes": 0}."""
    from drafters import DRAFTERS
    from jetflow_bench.training.config import recipe_fields, train_config

    common = axes_of(base.name).common
    plugin = DRAFTERS.get(base.name)
    config = None
    if trains(base.name):  # also checks --train-option before any model loads
        fields = recipe_fields(base.name)
        recorded = {k: v for k, v in trained_recipe(base.checkpoint).items() if k in fields}  # older heads: extra keys
        if recorded or base.checkpoint is None:
            config = train_config(base.name, **{**recorded, **recipe, **dict(base.train)})
    built = {**option_defaults(plugin), **dict(base.options)}
    return {c.key: (config.setting(c.key) if config is not None else None) if c.stage == "train" else built.get(c.key)
            for c in common}
