"""`jfbench ablate`: variants of one drafter on one grid, and their deltas against the default.

A variant is a named set of overrides of the base drafter spec (`grid.DrafterSpec`): inference
overrides go to the drafter's ``build`` (same weights), training overrides need their own head,
trained on demand and cached by its training config. Every variant runs as its own arm of an
ordinary sweep (drafter = the base name, variant = e.g. "head=bidirectional"), next to the default
arm (variant "default") and the AR baseline, so resume, losslessness and the summary come free.

One factor per variant (`one_factor`): a variant differs from the arm it is compared with in
exactly one setting. Where the base's own setting is impossible for the variant (a bidirectional
head cannot train on the packed layout nor read paths through tree-causal refinement), both
arms run at the nearest common setting: the variant is compared with a copy of the base at that
setting (e.g. `head=bidirectional` vs `layout=prefix`), and the table names it. Which settings
clash is declared by the drafter (`jetflow_bench.plugins.ablation_axes.CommonSetting`).

ablation table — one row per drafter × variant × suite × budget × batch size, repeats pooled:
    factor, compared_with, held_fixed   (what changed, against which arm, at which setting)
    other_target    (--allow-other-target only: the other target every head was trained on)
    tau, tau_default, tau_delta (+ _lo, _hi)        (``_default`` = the compared arm's value)
    speedup_decode_micro, speedup_default, speedup_delta (+ _lo, _hi)
with tau = Σemitted / Σsteps and speedup = Σ AR decode_s / Σ arm decode_s over the prompts
(both arms' sums pool all repeats), each arm divided by the AR baseline timed beside it in its
own rounds (``base_decode_s``; NaN for runs recorded before in-session pairing). The CI is a
paired percentile bootstrap over prompts: each resample draws prompts with replacement and uses
the same draw for the variant and the default, so prompt difficulty cancels out of the deltas.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from jetflow_bench.core.arms import AR_ARM, DEFAULT_VARIANT
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.measure.metrics import bootstrap_draws, rate, tau
from jetflow_bench.plugins import axes_of
from jetflow_bench.report.loading import with_cell_keys
from jetflow_bench.sweep.grid import DrafterSpec

# Variant flags of `TrainConfig`'s shared fields: each needs its own weights. A family's own recipe
# fields (its objective's `RecipeOption`s, e.g. layout, match_depth1) are training axes too; every
# other axis (a drafter's declared drafting options, --option KEY=...) is a build option of the
# base's own head. What a variant forces on both arms is declared by the drafter
# (`jetflow_bench.plugins.ablation_axes`, `one_factor`).
TRAIN_AXES = (
    "head",  # causal | bidirectional block mask in the head
    "loss",  # fkl | rkl | sft
    "data",  # target-regenerated | raw corpus
    "decay",  # loss weight per drafted depth, exp(-(k-1)/decay); 0 = uniform
)
DELTA_FIELDS = ("tau", "speedup")
HeadTrainer = Callable[[str, dict[str, Any]], Path | None]  # (drafter, recipe) -> cached head or None


def variants(
    base: DrafterSpec, axes: Mapping[str, Sequence[Any]], options: Mapping[str, Sequence[Any]]
) -> list[DrafterSpec]:
    """The base spec (variant "default") plus one spec per value of every axis.

    ``axes`` holds `TRAIN_AXES` and the base family's recipe fields (trained) and the drafter's
    drafting options (built); ``options`` holds generic build overrides (``--option max_ngram=2,4``).
    Example: axes {"refine_passes": [0, 2]} -> [default, refine_passes=0, refine_passes=2].
    """
    from jetflow_bench.plugins import family_options

    trained = {*TRAIN_AXES, *(o.name for o in family_options(base.name))}
    specs = [base]
    for key, values in [*axes.items(), *options.items()]:
        field_ = "train" if key in trained else "options"
        for value in values:
            overrides = {**dict(getattr(base, field_)), key: value}
            changes: dict[str, Any] = {"variant": f"{key}={value}", field_: tuple(sorted(overrides.items()))}
            if field_ == "train":
                changes["checkpoint"] = None  # other weights: given per variant or trained
            spec = dataclasses.replace(base, **changes)
            if spec.variant in {s.variant for s in specs}:
                raise JfbenchError(f"variant {spec.variant!r} is named twice: list each value once")
            specs.append(spec)
    if len(specs) == 1:
        raise JfbenchError("nothing to ablate: name at least one variant, e.g. --head bidirectional or --refine-passes 0,2")
    return specs


@dataclass(frozen=True)
class Comparison:
    """What one ablation variant is measured against."""

    variant: str  # the variant arm
    factor: str  # the one setting that differs, e.g. "head=bidirectional"
    reference: str = DEFAULT_VARIANT  # the arm it is compared with: the default, or the base at `held`
    held: str = ""  # the nearest common setting both arms run at ("" = the default's own settings)
    other_target: str = ""  # the fingerprint of the other target both arms' heads were trained on (--allow-other-target)

    def note(self, drafter: str) -> str:
        transfer = f"; both heads trained on another target ({self.other_target})" if self.other_target else ""
        if not self.held:
            return f"{drafter}[{self.variant}] vs {drafter}: only {self.factor} changes{transfer}"
        return (f"{drafter}[{self.variant}] vs {drafter}[{self.reference}]: only {self.factor} changes; both run at "
                f"the nearest common setting {self.held}{transfer}")


def one_factor(
    specs: Sequence[DrafterSpec], base_settings: Mapping[str, Any]
) -> tuple[list[DrafterSpec], dict[str, Comparison]]:
    """Make every variant differ from the arm it is compared with in exactly one factor.

    ``base_settings`` holds the base's effective value of each setting its drafter's common
    settings name (`jetflow_bench.plugins.ablation_axes.CommonSetting`; e.g. {"layout": "packed",
    "refine_passes": 0}; a missing or None value never conflicts). A variant whose setting the base
    cannot share is moved, with a reference copy of the base, to the nearest common setting. Example: base jetflow (packed layout), variant head=bidirectional ->
    the variant trains with layout=prefix and is compared with a new arm `layout=prefix` (the
    causal head trained with the prefix layout), not with the default.
    """
    base = next(s for s in specs if s.variant == DEFAULT_VARIANT)
    common = axes_of(base.name).common
    out, comparisons = list(specs), {}
    for i, spec in enumerate(specs):
        if spec.variant == DEFAULT_VARIANT:
            continue
        changed = [(k, v) for k, v in (*spec.train, *spec.options) if (k, v) not in (*base.train, *base.options)]
        needed = [(c.stage, c.key, c.value, c.why) for factor in changed for c in common
                  if c.factor == factor and c.needed(base_settings.get(c.key))]
        factor = ",".join(f"{k}={v}" for k, v in changed)
        if not needed:
            comparisons[spec.variant] = Comparison(spec.variant, factor)
            continue
        train = {k: v for stage, k, v, _ in needed if stage == "train"}
        infer = {k: v for stage, k, v, _ in needed if stage == "infer"}
        out[i] = _with(spec, train, infer, spec.variant)
        reference = _with(base, train, infer, ",".join(f"{k}={v}" for _, k, v, _ in needed))
        if reference.variant not in {s.variant for s in out}:
            out.append(reference)
        held = ", ".join(f"{k}={v} ({why})" for _, k, v, why in needed)
        comparisons[spec.variant] = Comparison(spec.variant, factor, reference.variant, held)
    return out, comparisons


def _with(spec: DrafterSpec, train: Mapping[str, Any], infer: Mapping[str, Any], variant: str) -> DrafterSpec:
    changes: dict[str, Any] = {"variant": variant, "options": tuple(sorted({**dict(spec.options), **infer}.items()))}
    if train:
        changes |= {"train": tuple(sorted({**dict(spec.train), **train}.items())), "checkpoint": None}
    return dataclasses.replace(spec, **changes)


def trained_recipe(checkpoint: str | Path | None) -> dict[str, Any]:
    """The training recipe a jfbench head records in its config.json (``training.config``).

    {} when there is none (no checkpoint, a released head, an unreadable folder — loading the
    head reports that one properly).
    """
    try:
        raw = json.loads((Path(checkpoint) / "config.json").read_text()) if checkpoint else {}
    except (OSError, json.JSONDecodeError):
        return {}
    recipe = raw.get("training", {}).get("config", {})
    return {k: tuple(v) if isinstance(v, list) else v for k, v in recipe.items() if k != "drafter"}


def with_checkpoints(
    specs: Sequence[DrafterSpec],
    given: Mapping[str, Path],
    train: HeadTrainer | None,
    recipe: Mapping[str, Any] | None = None,
) -> list[DrafterSpec]:
    """Fill in checkpoints: ``given[variant]`` first, then the spec's own, else a trained head.

    Inference variants share the default's checkpoint. A variant with training overrides gets a
    head trained with the default head's own recipe (read from its checkpoint, then ``recipe``
    on top) changed only by its overrides, so the ablation compares like with like.
    ``train(drafter, recipe)`` returns a cached head, or None for a drafter it cannot train
    (e.g. ngram, which needs no weights).
    """
    unknown = sorted(set(given) - {s.variant for s in specs})
    if unknown:
        raise JfbenchError(f"--checkpoint names unknown variant(s) {unknown}: use one of {[s.variant for s in specs]}")
    default = next(s for s in specs if s.variant == DEFAULT_VARIANT)
    default_ckpt = given.get(DEFAULT_VARIANT) or default.checkpoint
    if default_ckpt is None and train is not None:
        default_ckpt = train(default.name, dict(recipe or {}))
    base_recipe = {**trained_recipe(default_ckpt), **(recipe or {})}
    out = []
    for spec in specs:
        if spec.variant in given:
            check_given_head(spec, given[spec.variant])
        ckpt = given.get(spec.variant) or spec.checkpoint or (None if spec.train else default_ckpt)
        if ckpt is None and set(dict(spec.train)) == {"seed"}:  # an inference variant's seed copy (`with_seeds`)
            ckpt = given.get(_join_seed(DEFAULT_VARIANT, dict(spec.train)["seed"]))
        if ckpt is None and spec.train:
            ckpt = train(spec.name, {**base_recipe, **dict(spec.train)}) if train is not None else None
            if ckpt is None:
                raise JfbenchError(
                    f"variant {spec.variant!r} needs its own trained head: pass --checkpoint {spec.variant}=DIR "
                    f"(jfbench cannot train drafter {spec.name!r})"
                )
        out.append(dataclasses.replace(spec, checkpoint=str(ckpt) if ckpt else None))
    return out


def check_given_head(spec: DrafterSpec, checkpoint: Path) -> None:
    """A head given for a training variant must have been trained with that variant's setting:
    ``--checkpoint loss=rkl=DIR`` with an fkl head would label fkl numbers as rkl's. Heads that
    record no recipe (released heads, older jfbench heads) are taken as given."""
    recorded = trained_recipe(checkpoint)
    for key, wanted in dict(spec.train).items():
        if key in recorded and recorded[key] != wanted:
            raise JfbenchError(
                f"--checkpoint {spec.variant}={checkpoint}: that head was trained with {key}={recorded[key]}, "
                f"not {wanted}; pass a head trained with --{key.replace('_', '-')} {wanted}"
            )


def with_seeds(specs: Sequence[DrafterSpec], seeds: Sequence[int], own_seed: int) -> list[DrafterSpec]:
    """Every arm again for each head seed other than ``own_seed`` (the base head's), trained on demand.

    The copies are named by the seed: default -> "seed=1", "head=bidirectional" -> "head=bidirectional,seed=1";
    inference variants at seed s read the default head of seed s (the same recipe, so one cached head).
    """
    out = list(specs)
    for seed in seeds:
        if seed == own_seed:
            continue
        for spec in specs:
            name = f"seed={seed}" if spec.variant == DEFAULT_VARIANT else f"{spec.variant},seed={seed}"
            train = tuple(sorted({**dict(spec.train), "seed": seed}.items()))
            out.append(dataclasses.replace(spec, variant=name, train=train, checkpoint=None))
    return out


def split_seed(variant: str) -> tuple[str, int | None]:
    """'head=bidirectional,seed=2' -> ('head=bidirectional', 2); 'seed=1' -> ('default', 1); no seed -> (variant, None)."""
    parts = variant.split(",")
    seeds = [int(p.removeprefix("seed=")) for p in parts if p.startswith("seed=")]
    rest = ",".join(p for p in parts if not p.startswith("seed="))
    return rest or DEFAULT_VARIANT, seeds[0] if seeds else None


def _join_seed(variant: str, seed: int | None) -> str:
    if seed is None:
        return variant
    return f"seed={seed}" if variant == DEFAULT_VARIANT else f"{variant},seed={seed}"


def _per_prompt(requests: pd.DataFrame) -> pd.DataFrame:
    """Sums over repeats per prompt: emitted, steps, decode_s and the AR decode_s timed beside each
    request in its round (base_decode_s; NaN when a request lacks it: no in-session baseline)."""
    frame = requests.assign(base_decode_s=requests.get("base_decode_s", np.nan))
    columns = ["emitted", "steps", "decode_s", "base_decode_s"]
    return frame.groupby("request")[columns].agg(lambda values: values.sum(skipna=False))


def _stats(arm: np.ndarray, seeds: np.ndarray, prompts: np.ndarray) -> dict[str, np.ndarray]:
    """tau and micro speed-up for each row of draws: ``arm`` (S, n, 4) = emitted, steps, decode_s,
    base_decode_s per seed and prompt; ``seeds`` (R, S) and ``prompts`` (R, n) index them. The
    speed-up divides by the baseline timed beside the arm itself, in its own session."""
    picked = arm[seeds[:, :, None], prompts[:, None, :]]  # (R, S, n, 4)
    emitted, steps, time, base = (picked[..., k].sum(axis=(1, 2)) for k in range(4))
    return {"tau": tau(emitted, steps), "speedup": rate(base, time)}


def ablation_table(
    requests: pd.DataFrame, n_boot: int = 1000, seed: int = 0, comparisons: Mapping[str, Comparison] | None = None
) -> pd.DataFrame:
    """Deltas of every variant against the arm `comparisons` names (default: the default arm).

    Arms of several head seeds ("…,seed=N", `with_seeds`) pool into one row per variant: each seed
    is paired with the compared arm of the same seed, and the bootstrap resamples seeds and prompts
    (both with replacement, the same draw for every arm). A variant that is only another variant's
    reference arm (`one_factor`) gets no row. Seed spread: tau_seed_min/max (the variant's τ per
    seed) and tau_delta_seed_min/max (its delta per seed).
    """
    comparisons = dict(comparisons or {})
    references = {c.reference for c in comparisons.values()} - set(comparisons)
    requests = with_cell_keys(requests)
    group_keys = ["suite", "budget", "batch_size", "temperature"]
    arms = requests[requests["drafter"] != AR_ARM]
    arms = arms.assign(logical=[split_seed(v)[0] for v in arms["variant"]])
    rows = []
    for (drafter, variant, suite, budget, batch_size, temperature), arm in arms.groupby(["drafter", "logical", *group_keys]):
        if variant == DEFAULT_VARIANT or variant in references:
            continue
        comparison = comparisons.get(variant, Comparison(variant, variant))
        same = ((requests["suite"] == suite) & (requests["batch_size"] == batch_size)
                & (requests["temperature"] == temperature))
        mine = requests[same & (requests["drafter"] == drafter) & (requests["budget"] == budget)]
        seeds = list(dict.fromkeys(split_seed(v)[1] for v in arm["variant"]))
        pairs = [(arm[arm["variant"] == _join_seed(variant, s)], mine[mine["variant"] == _join_seed(comparison.reference, s)])
                 for s in seeds]
        pairs = [(v, d) for v, d in pairs if not v.empty and not d.empty]
        if not pairs:
            continue
        frames = [(_per_prompt(v), _per_prompt(d)) for v, d in pairs]
        prompts = frames[0][0].index
        for v, d in frames:
            prompts = prompts.intersection(v.index).intersection(d.index)
        var = np.stack([v.loc[prompts].to_numpy(float) for v, _ in frames])  # (S, n, 4)
        ref = np.stack([d.loc[prompts].to_numpy(float) for _, d in frames])  # (S, n, 4)
        n_seeds, n = var.shape[:2]
        all_seeds, all_prompts = np.arange(n_seeds)[None, :], np.arange(n)[None, :]
        draws = bootstrap_draws(n, n_seeds, n_boot, seed)  # seeds (n_boot, S), prompts (n_boot, n)
        v_point, d_point = _stats(var, all_seeds, all_prompts), _stats(ref, all_seeds, all_prompts)
        v_boot, d_boot = _stats(var, *draws), _stats(ref, *draws)
        one = [np.array([[k]]) for k in range(n_seeds)]
        per_seed_v = [_stats(var, k, all_prompts)["tau"][0] for k in one]
        per_seed_d = [_stats(ref, k, all_prompts)["tau"][0] for k in one]
        row = {"drafter": drafter, "variant": variant, "suite": suite, "budget": budget, "batch_size": batch_size,
               "temperature": temperature, "n_prompts": n, "seeds": n_seeds, "repeats": arm["repeat"].nunique(),
               "factor": comparison.factor,
               "compared_with": comparison.reference, "held_fixed": comparison.held or "the default's settings"}
        if comparison.other_target:  # a transfer's column only: other runs' tables keep their columns
            row["other_target"] = comparison.other_target
        for k, name in (("tau", "tau"), ("speedup", "speedup_decode_micro")):
            row[name], row[f"{k}_default"] = float(v_point[k][0]), float(d_point[k][0])
            row[f"{k}_delta"] = row[name] - row[f"{k}_default"]
            delta = v_boot[k] - d_boot[k]
            timed = n_boot and not np.isnan(delta).all()  # a --tau-only run has no speed-up to bound
            lo, hi = np.nanpercentile(delta, [2.5, 97.5]) if timed else (np.nan, np.nan)
            row[f"{k}_delta_lo"], row[f"{k}_delta_hi"] = float(lo), float(hi)
        deltas = [v - d for v, d in zip(per_seed_v, per_seed_d, strict=True)]
        row |= {"tau_seed_min": min(per_seed_v), "tau_seed_max": max(per_seed_v),
                "tau_delta_seed_min": min(deltas), "tau_delta_seed_max": max(deltas)}
        rows.append(row)
    return pd.DataFrame(rows)
