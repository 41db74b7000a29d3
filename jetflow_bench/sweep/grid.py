"""The sweep's configuration, its grid of cells, and the hashes that identify both.

A *cell* is one measured combination of the cell keys ``suite, drafter, variant, budget,
batch_size, repeat, temperature, load`` (load "" = no arrivals: the prompts decode in batches; a
load level is a serving cell, `jetflow_bench.sweep.load`). The AR baseline is a cell like any other (drafter `AR_ARM`,
variant "default", budget 1) and is run for every (suite, batch_size, repeat, temperature) before
the drafters that pair with it, so that losslessness can be checked against it as soon as a
drafter cell finishes.

Hashes: `config_hash` covers the whole resolved config (a run folder holds exactly one), with
the target and checkpoints named by their weights' fingerprint rather than their path;
`cell_hash` covers what determines one cell's numbers (the config without the grid lists, plus
the cell and its drafter spec), so every result row says precisely what produced it. Hashes leave
out a field at its default (`jetflow_bench.core.hashing.hashed_fields`, except the fields they have always
covered), and keep the fixed key ``temperature: 0.0`` that configs had before sampling existed: a
config that sets no newer field hashes as it always did (earlier run folders resume, committed
reference runs stay comparable), and adding ``--temperatures 0,1`` to a greedy run is a grid change
that keeps its finished T = 0 cells.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jetflow_bench.core.arms import AR_ARM, DEFAULT_VARIANT, arm_label
from jetflow_bench.core.budget_policy import DEFAULT_CANDIDATES, Budget, check_budget
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.fingerprint import model_fingerprint
from jetflow_bench.core.hashing import hashed_fields
from jetflow_bench.engine.sampling import SamplingParams

CELL_KEYS = ["suite", "drafter", "variant", "budget", "batch_size", "repeat", "temperature", "load"]
PAIR_KEYS = ["suite", "batch_size", "repeat", "temperature", "load"]  # a drafter cell's AR baseline shares these
GRID_FIELDS = ("drafters", "suites", "budgets", "batch_sizes", "repeats", "temperatures", "loads")  # not in a cell's hash


@dataclass(frozen=True)
class DrafterSpec:
    """One drafter arm: a registered drafter, its checkpoint and option overrides.

    A variant is a named set of overrides of a base spec: ``options`` go to ``build`` (inference
    settings such as ``refine_passes``), ``train`` to the head trainer (settings that need their
    own weights, such as ``head="bidirectional"``).
    """

    name: str  # canonical registry name
    variant: str = DEFAULT_VARIANT
    checkpoint: str | None = None  # absolute path, or None (no weights, or trained on demand)
    options: tuple[tuple[str, Any], ...] = ()  # sorted (key, value) pairs passed to build()
    train: tuple[tuple[str, Any], ...] = ()  # sorted (key, value) pairs passed to the trainer
    budgets: tuple[Budget, ...] | None = None  # an arm that ignores B runs only at these (None: the grid's)

    @property
    def label(self) -> str:
        return arm_label(self.name, self.variant)

    @property
    def full_label(self) -> str:
        """The arm named by its options even where its variant is the default: an ablation's base
        ``eagle[top_k=4]`` (whose tables call it ``eagle``, the default every variant is compared with)."""
        return arm_label(self.name, self.variant if self.variant != DEFAULT_VARIANT else options_label(dict(self.options)))


AR_SPEC = DrafterSpec(AR_ARM)


# The near-tie tolerance per compute dtype when --tie-eps is not given: fp32 keeps its long-standing
# 1e-4; a half-precision run gets one ulp of a logit of magnitude 16-32 in its dtype, since that is
# what two equal sums reduced in different orders differ by there (at 1e-4 a bf16 run flags rounding
# as a bug). Keys: every dtype `runtime.resolve_dtype` accepts.
DEFAULT_TIE_EPS = {"float32": 1e-4, "bfloat16": 0.125, "float16": 2.0**-6}


@dataclass(frozen=True)
class SweepConfig:
    """Everything that determines a sweep's numbers, resolved (no "auto" values left)."""

    target: str  # hub id or absolute local path
    drafters: tuple[DrafterSpec, ...]  # the AR baseline is implicit and always run
    suites: tuple[str, ...]  # canonical suite names
    budgets: tuple[Budget, ...]  # B, nodes per tree incl. the root (docs/methodology.md), or the per-step policy
    batch_sizes: tuple[int, ...]
    repeats: int  # timing repeats; each repeat re-runs the AR baseline too
    device: str  # resolved, e.g. "cpu", "cuda:0"
    dtype: str  # resolved, e.g. "float32"
    threads: int  # torch CPU threads in effect
    limit: int | None = None  # prompts per suite (None: all)
    max_new_tokens: int | None = None  # None: each suite's own default
    temperatures: tuple[float, ...] = (0.0,)  # sampling temperatures, a grid axis (0 = greedy)
    top_p: float = 1.0  # nucleus mass kept at temperature > 0 (1 = all tokens)
    top_k: int = 0  # most likely tokens kept at temperature > 0 (0 = all)
    sample_seed: int = 0  # which `limit` prompts a suite samples
    seed: int = 0  # torch seed set before every cell; with the request id, seeds its sampling stream
    engine: str = "hf"
    tie_eps: float = DEFAULT_TIE_EPS["float32"]  # logit gap under which a divergence is an excused near-tie
    warmup_tokens: int = 8  # new tokens of the untimed warm-up generate before each cell
    n_boot: int = 1000  # bootstrap resamples for speed-up CIs
    attention: str = "sdpa"  # attention backend of the target and heads (jetflow_bench.engine.attention)
    profile: bool = False  # time each step's draft / verify / other split on a GPU (`--profile`)
    # target forwards at bucketed static shapes: "inductor" (--compile; True in runs made before --graphs), "graphs"; None: eager
    compile: bool | str | None = None
    tau_only: bool = False  # time no baseline beside the arms: τ and counters, no speed-up claimed (`--tau-only`)
    loads: tuple[str, ...] = ()  # serving load levels (`--load`, jetflow_bench.sweep.load); () = batches only
    extra: tuple[tuple[str, Any], ...] = field(default_factory=tuple)  # e.g. the ablation's flags


@dataclass(frozen=True, order=True)
class Cell:
    suite: str
    drafter: str
    variant: str
    budget: Budget
    batch_size: int
    repeat: int
    temperature: float = 0.0  # 0 = greedy
    load: str = ""  # a serving load level ("poisson:2", "concurrency:4"); "" = batches (no arrivals)

    @property
    def is_baseline(self) -> bool:
        return self.drafter == AR_ARM

    @property
    def keys(self) -> dict[str, Any]:
        """The cell keys as table columns (the budget as its ``budget`` column value)."""
        return {**{f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, "budget": self.budget.column}

    @property
    def pair(self) -> tuple[str, int, int, float, str]:
        """The (suite, batch_size, repeat, temperature, load) its AR baseline shares."""
        return self.suite, self.batch_size, self.repeat, self.temperature, self.load

    @property
    def baseline(self) -> Cell:
        """The AR cell this cell is paired with."""
        return Cell(self.suite, AR_ARM, DEFAULT_VARIANT, Budget.fixed(1), self.batch_size, self.repeat, self.temperature,
                    self.load)

    @property
    def cell_id(self) -> str:
        """File-name-safe, readable and unique: gsm8k__ngram__default__B64__bs4__r0 (+ __T1 when sampled,
        + __Lpoisson-2 under a load)."""
        safe = [re.sub(r"[^A-Za-z0-9_.-]+", "-", s) for s in (self.suite, self.drafter, self.variant)]
        sampled = [f"T{self.temperature:g}"] if self.temperature else []
        loaded = ["L" + re.sub(r"[^A-Za-z0-9_.-]+", "-", self.load)] if self.load else []
        return "__".join([*safe, f"B{self.budget.label}", f"bs{self.batch_size}", f"r{self.repeat}", *sampled, *loaded])

    def label(self) -> str:
        arm = arm_label(self.drafter, self.variant)
        sampled = f" T={self.temperature:g}" if self.temperature else ""
        loaded = f" load={self.load}" if self.load else ""
        return f"{self.suite} {arm} B={self.budget.label} bs={self.batch_size} r{self.repeat}{sampled}{loaded}"


def stable_hash(obj: Any, length: int = 12) -> str:
    """Hex digest of a JSON rendering with sorted keys (dataclasses and paths included)."""
    blob = json.dumps(_plain(obj), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def _plain(obj: Any) -> Any:
    if isinstance(obj, Budget):  # a fixed size hashes as the bare int it always was
        return {"auto": list(obj.sizes)} if obj.policy else obj.nodes
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def config_dict(config: SweepConfig) -> dict[str, Any]:
    """The config as plain JSON data (what the manifest stores and the hash covers)."""
    return _plain(config)


# The fields every config hash has covered, at any value, since before the rule of
# `hashed_fields`: every other field is left out at its default, so a new field keeps older hashes.
ALWAYS_HASHED = ("limit", "max_new_tokens", "sample_seed", "seed", "engine", "tie_eps", "warmup_tokens", "n_boot", "extra")
SPEC_ALWAYS_HASHED = ("variant", "checkpoint", "options", "train")


def config_identity(plain: dict[str, Any]) -> dict[str, Any]:
    """The config (as `config_dict` gives it and a manifest stores it) as its hashes see it: fields at
    their default left out (`hashed_fields`; the sampling fields at greedy decoding's values, next to
    the fixed ``temperature: 0.0`` of configs made before sampling existed), the target and
    checkpoints named by their weights, not their paths."""
    compile = plain.get("compile") or None  # eager runs made before --graphs recorded False
    if compile == "inductor":  # compiled runs made before --graphs existed recorded True
        compile = True
    identity = hashed_fields({**plain, "compile": compile}, SweepConfig, ALWAYS_HASHED)
    return {**identity, "temperature": 0.0, "target": model_fingerprint(plain["target"]),
            "drafters": [_spec_identity(s) for s in plain["drafters"]]}


def _identity(config: SweepConfig) -> dict[str, Any]:
    return config_identity(config_dict(config))


def _spec_identity(spec: dict[str, Any]) -> dict[str, Any]:
    checkpoint = spec["checkpoint"] and model_fingerprint(spec["checkpoint"])
    return {**hashed_fields(spec, DrafterSpec, SPEC_ALWAYS_HASHED), "checkpoint": checkpoint}


def config_hash(config: SweepConfig) -> str:
    """Same weights and settings -> same hash, wherever the target and heads are stored."""
    return stable_hash(_identity(config))


def without_grid(identity: dict[str, Any]) -> dict[str, Any]:
    """A config's identity without the grid lists: what the settings hash and every cell hash cover."""
    return {k: v for k, v in identity.items() if k not in GRID_FIELDS}


def _settings(config: SweepConfig) -> dict[str, Any]:
    return without_grid(_identity(config))


def settings_hash(config: SweepConfig) -> str:
    """Hash of the config without the grid lists: runs that differ only in their grid share cells."""
    return stable_hash(_settings(config))


def cell_hash(config: SweepConfig, cell: Cell, spec: DrafterSpec) -> str:
    """Hash of what determines one cell: shared settings, the cell keys and its drafter spec."""
    keys = hashed_fields({**cell.keys, "budget": _plain(cell.budget)}, Cell)  # a policy's candidates count
    return stable_hash({"config": _settings(config), "cell": keys, "drafter": _spec_identity(_plain(spec))})


def sampling_for(config: SweepConfig, cell: Cell) -> SamplingParams:
    """How the cell's tokens are chosen: its temperature, the run's top-p / top-k, the run's seed."""
    return SamplingParams(cell.temperature, config.top_p, config.top_k, config.seed)


def spec_for(config: SweepConfig, cell: Cell) -> DrafterSpec:
    if cell.is_baseline:
        return AR_SPEC
    for spec in config.drafters:
        if (spec.name, spec.variant) == (cell.drafter, cell.variant):
            return spec
    raise KeyError(f"no drafter spec for cell {cell.label()}")


def cells(config: SweepConfig) -> Iterator[Cell]:
    """The grid: repeat → suite → temperature → batch size → load → [AR, drafter × budget].

    The sweep runs it by pairing group (`jetflow_bench.sweep.groups`), timing a group's AR baseline
    and arms interleaved batch by batch; this order fixes the order of the cells inside a round.
    """
    for repeat, suite, temperature, batch_size, load in itertools.product(
        range(config.repeats), config.suites, config.temperatures, config.batch_sizes, config.loads or ("",)
    ):
        yield Cell(suite, AR_ARM, DEFAULT_VARIANT, Budget.fixed(1), batch_size, repeat, temperature, load)
        for spec in config.drafters:
            for budget in spec.budgets or config.budgets:
                yield Cell(suite, spec.name, spec.variant, budget, batch_size, repeat, temperature, load)


# ------------------------------------------------------------------ parsing user input
def parse_ints(text: str, option: str, minimum: int | None = 1) -> tuple[int, ...]:
    """'16,64,256' -> (16, 64, 256); order kept, duplicates dropped."""
    values: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        try:
            value = int(part)
        except ValueError:
            raise JfbenchError(f"{option} {text!r}: {part!r} is not an integer; use e.g. {option} 1,4") from None
        if minimum is not None and value < minimum:
            raise JfbenchError(f"{option} {value} is too small: use values >= {minimum}")
        if value not in values:
            values.append(value)
    return tuple(values)


def parse_temperatures(text: str) -> tuple[float, ...]:
    """'0,1' -> (0.0, 1.0); order kept, duplicates dropped; each must be a valid temperature."""
    values: list[float] = []
    for part in (p.strip() for p in text.split(",")):
        try:
            value = float(part)
        except ValueError:
            raise JfbenchError(f"--temperatures {text!r}: {part!r} is not a number; use e.g. --temperatures 0,1") from None
        SamplingParams(temperature=value)  # range check, one message for every entry point
        if value not in values:
            values.append(value)
    return tuple(values)


def parse_budgets(text: str, candidates: str | None = None) -> tuple[Budget, ...]:
    """'16,auto' -> (fixed 16, the policy over ``candidates``, `--auto-budgets`, read only for auto):
    "auto" may stand alone or beside sizes."""
    parts = [p.strip() for p in text.split(",")]
    auto = any(p.lower() == "auto" for p in parts)
    sizes = ",".join(p for p in parts if p.lower() != "auto")
    budgets = tuple(Budget.fixed(n) for n in parse_ints(sizes, "--budgets", minimum=None)) if sizes else ()
    if not auto:
        return budgets
    return (*budgets, Budget.auto(parse_candidates(candidates) if candidates else DEFAULT_CANDIDATES))


def parse_sizes(text: str, command: str) -> tuple[int, ...]:
    """'16,64' -> (16, 64) for a ``command`` that times fixed tree sizes: "auto" is refused."""
    budgets = parse_budgets(text)
    if any(b.policy for b in budgets):
        raise JfbenchError(f"--budgets {text}: {command} times fixed budgets; give sizes only, e.g. --budgets 16,64")
    return tuple(b.nodes for b in budgets)


def parse_candidates(text: str) -> tuple[int, ...]:
    """'1,4,16' -> the candidate sizes of `--budgets auto` (`--auto-budgets`), range-checked."""
    candidates = parse_ints(text, "--auto-budgets", minimum=None)
    for size in candidates:
        check_budget(size)
    return candidates


def parse_names(text: str, option: str) -> list[str]:
    names = [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise JfbenchError(f"{option} is empty: name at least one, e.g. {option} gsm8k")
    return names


def options_label(options: dict[str, Any]) -> str:
    """The variant name of an arm's options: {"top_k": 4, "depth": 15} -> 'depth=15,top_k=4'."""
    return ",".join(f"{k}={v}" for k, v in sorted(options.items())) or DEFAULT_VARIANT


def parse_value(text: str) -> Any:
    """'2' -> 2, '0.5' -> 0.5, 'true' -> True, anything else stays a string."""
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip()
