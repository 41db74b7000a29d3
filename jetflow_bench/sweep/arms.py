"""Drafter arms from the command line: ``NAME[KEY=VALUE,...]=CHECKPOINT_DIR`` -> `DrafterSpec`.

`sweep --drafters` and `ablate --drafter` read arms the same way (`arm_syntax.parse_drafters`). An
option is checked against the drafter's own list (`option_defaults`), and an option that differs
from the drafter's default becomes the arm's variant, so tables name the arm ``eagle[depth=15]``;
an option set to its default is dropped (``jetflow[refine_passes=0]`` is plain ``jetflow``).
`sweep_arms` reads a whole ``--drafters`` list (``vllm:*`` arms included) and checks what can be
checked before any model loads; `check_auto_budgets` refuses arms `--budgets auto` cannot rank, and
`check_compiled_budgets` budgets that `--compile` cannot draft at. `pin_heads` refuses a head used
under another family's name or with another target than the one it was trained on (same shapes,
other weights: its τ would silently collapse), unless the transfer is deliberate and marked.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jetflow_bench.core.arms import DEFAULT_VARIANT
from jetflow_bench.core.budget_policy import Budget
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.registry import did_you_mean
from jetflow_bench.sweep.grid import DrafterSpec, options_label


def option_defaults(drafter_cls: type) -> dict[str, Any]:
    """Options the drafter's ``build`` accepts -> their defaults (None: decided when it loads its head).

    A drafter class may say so itself (``option_defaults()``); otherwise its ``__init__`` keywords count.
    """
    own = getattr(drafter_cls, "option_defaults", None)
    if own is not None:
        return own()
    params = list(inspect.signature(drafter_cls.__init__).parameters.values())[1:]
    return {p.name: None if p.default is inspect.Parameter.empty else p.default for p in params}


def check_option_names(name: str, keys: Iterable[str]) -> dict[str, Any]:
    """The drafter's option defaults; a key it does not take is a usage error naming the choices."""
    from drafters import DRAFTERS

    defaults = option_defaults(DRAFTERS.get(name))
    for key in keys:
        if key not in defaults:
            hint = did_you_mean(key, defaults)
            raise JfbenchError(
                f"drafter {name!r} has no option {key!r}: {hint}choose from {', '.join(sorted(defaults))}"
            )
    return defaults


def check_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """``options`` without those equal to the drafter's defaults (unknown keys: `check_option_names`)."""
    defaults = check_option_names(name, options)
    return {k: v for k, v in options.items() if v != defaults[k]}


def arm_spec(name: str, options: dict[str, Any], checkpoint: Path | None, variant: str | None = None) -> DrafterSpec:
    """The spec of one arm; its variant names its non-default options unless ``variant`` is given."""
    from drafters import runnable_drafter

    canonical = runnable_drafter(name)
    kept = check_options(canonical, options)
    return DrafterSpec(
        canonical, variant=variant or options_label(kept), checkpoint=str(checkpoint) if checkpoint else None,
        options=tuple(sorted(kept.items())),
    )


OTHER_TARGET = "other-target"  # in an arm's variant: its head was trained on another target (`pin_heads`)


def sweep_arms(text: str, engine: str) -> list[DrafterSpec]:
    """The arms of ``sweep --drafters`` (jfbench drafters and vLLM arms), each named once, every
    learned arm's head folder checked before the target loads and the AR cells run."""
    from jetflow_bench.sweep.arm_syntax import parse_drafters

    specs = [_arm(name, options, checkpoint, engine) for name, options, checkpoint in parse_drafters(text)]
    labels = [s.label for s in specs]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise JfbenchError(f"--drafters names the arm {twice[0]!r} twice: give each arm different options")
    _check_heads(specs)
    return specs


def _check_heads(specs: list[DrafterSpec]) -> None:
    """Every learned arm names a head folder of its own family."""
    for spec in specs:
        learned = _learned(spec.name)
        if learned is not None:
            learned.check_checkpoint(spec.checkpoint)
            check_family(spec)


def _learned(name: str) -> type | None:
    """The drafter class of a learned arm (it loads a head), else None."""
    from drafters import DRAFTERS
    from drafters.learned import LearnedDrafter

    plugin = DRAFTERS.get(name) if name in DRAFTERS else None
    return plugin if isinstance(plugin, type) and issubclass(plugin, LearnedDrafter) else None


def check_family(spec: DrafterSpec) -> None:
    """A jfbench head loads only under an arm of the family it was trained as (``jetflow-refine``
    reads ``jetflow`` heads, ``eagle3`` reads ``eagle`` heads): an EAGLE head under ``jetflow=``
    would draft garbage (τ 1.00) without any error.

    One exception: the ablation arm ``jetflow[head=bidirectional]`` reads an all-mask dflash head,
    which is that arm's head weight for weight (the same recipe with the bidirectional mask;
    tests/training/test_training.py), so claim 2 can pair a jetflow head with its dflash twin."""
    from jetflow_bench.heads.checkpoint import head_origin

    learned = _learned(spec.name)
    if learned is None or spec.checkpoint is None:
        return
    family, _ = head_origin(Path(spec.checkpoint))
    wants = learned.train_name()
    trained_as = _learned(family).train_name() if family and _learned(family) else family
    if (trained_as, wants) == ("dflash", "jetflow") and is_bidirectional_twin(spec):
        return
    if trained_as is not None and trained_as != wants:
        raise JfbenchError(
            f"{spec.checkpoint} is a head trained as {family!r}, not {wants!r}: write the arm as {family}={spec.checkpoint}, "
            f"or train one with `jfbench train --drafter {wants} --target T --out DIR`"
        )


def is_bidirectional_twin(spec: DrafterSpec) -> bool:
    """A jetflow arm whose variant is ``head=bidirectional``, given a dflash head trained on
    all-mask blocks (its layout unset or ``mask``): the head `jfbench train --drafter jetflow
    --head bidirectional` would train with the same recipe."""
    from drafters.block import dflash_all_mask
    from jetflow_bench.sweep.ablation import trained_recipe

    return dict(spec.train).get("head") == "bidirectional" and dflash_all_mask(trained_recipe(spec.checkpoint).get("layout"))


def pin_heads(
    specs: Iterable[DrafterSpec], target: str, allow_other_target: bool = False, flag: str = "--allow-other-target",
) -> list[DrafterSpec]:
    """``specs`` with every head checked against ``target`` (`other_target_heads`); an allowed
    transfer is kept with ``other-target`` in its variant, so that every table, plot and the report
    name the arm as one."""
    specs = list(specs)
    moved = other_target_heads(specs, target, allow_other_target, flag)
    return [dataclasses.replace(spec, variant=OTHER_TARGET if spec.variant == DEFAULT_VARIANT
                                else f"{spec.variant},{OTHER_TARGET}") if spec.label in moved else spec
            for spec in specs]


def other_target_heads(
    specs: Iterable[DrafterSpec], target: str, allow_other_target: bool = False, flag: str = "--allow-other-target",
) -> dict[str, str]:
    """Arm label -> the fingerprint of the other target its head was trained on, for every learned
    arm whose head records another target than ``target`` (`jfbench train` records it). Such a head
    is refused unless ``allow_other_target``; ``flag`` is the command's way to allow it (empty: the
    command has none)."""
    from jetflow_bench.core.fingerprint import model_fingerprint
    from jetflow_bench.heads.checkpoint import head_origin

    here = model_fingerprint(target)
    moved = {}
    for spec in specs:
        check_family(spec)
        family, trained_on = head_origin(Path(spec.checkpoint)) if _learned(spec.name) and spec.checkpoint else (None, None)
        if trained_on is None or trained_on == here:
            continue
        if not allow_other_target:
            allow = f", or pass {flag} to use it anyway (the arm is then marked {OTHER_TARGET})" if flag else ""
            raise JfbenchError(
                f"{spec.checkpoint} was trained on target {trained_on}, not on this --target ({here}): retrain it with "
                f"`jfbench train --drafter {family} --target {target_name(target)} --out DIR`{allow}"
            )
        moved[spec.label] = trained_on
    return moved


def target_name(target: str) -> str:
    """The shortest way to write ``target`` on the command line: its name where it is the folder a
    named target resolves to, else the folder (or hub id) itself."""
    from jetflow_bench.targets import name_of

    return name_of(target) or target


def _arm(name: str, options: dict[str, Any], checkpoint: Path | None, engine: str) -> DrafterSpec:
    """A jfbench drafter arm, or a vLLM arm (its options go into vLLM's --speculative-config; the
    method is checked against the installed vLLM when the engine loads)."""
    from jetflow_bench.integrations.vllm_arms import budgets_of, is_vllm_arm

    if not is_vllm_arm(name):
        return arm_spec(name, options, checkpoint)
    if engine != "vllm":
        raise JfbenchError(f"--drafters {name!r} is a vLLM arm: add --engine vllm")
    canonical = name.strip().lower()
    return DrafterSpec(canonical, variant=options_label(options), checkpoint=str(checkpoint) if checkpoint else None,
                       options=tuple(sorted(options.items())), budgets=budgets_of(canonical))


def check_auto_budgets(specs: Iterable[DrafterSpec]) -> None:
    """--budgets auto needs node scores that are log-probs: refuse the others before any model loads."""
    from drafters import DRAFTERS
    from jetflow_bench.core.budget_policy import require_logp_scores

    for spec in specs:
        require_logp_scores(DRAFTERS.get(spec.name).scores_with(dict(spec.options)), spec.label)


def check_compiled_budgets(specs: Iterable[DrafterSpec], budgets: Iterable[Budget]) -> None:
    """--compile: refuse an arm whose head forwards at the grid's largest budget outgrow the compiled
    buckets, before any model loads (not at its warm-up, after the target and the AR cells)."""
    from drafters import DRAFTERS
    from jetflow_bench.engine.compiled import check_compiled_budget

    most = max(b.nodes for b in budgets)
    for spec in specs:
        check_compiled_budget(spec.full_label, most, DRAFTERS.get(spec.name).max_compiled_budget(dict(spec.options)))
