"""The paper's claims as verdicts computed from the measurements, never written by hand.

`verdict` turns a matched-pair effect with its 95% CI over head seeds x prompts into one of
`VERDICTS` by the rule stated in docs/methodology.md ("Claim verdicts"). `claims_table` computes the
effects of claim 1 (JetFlow keeps gaining with the budget where DFlash-T saturates: the difference
of their τ ratios at B = 256 and 64) and claim 2 (a causal head against a bidirectional one: the
relative τ difference) from run folders or from the collected ``claims/`` folders of
results/baselines, with what the setup could show at most (`reachable`) where it is known.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.measure.metrics import bootstrap_draws, tau

VERDICTS = ("reproduced", "contradicted", "inconclusive", "untestable here")
N_BOOT = 2000
# The paper's τ at T = 0 (Qwen3-8B, H100; DESIGN of the suite, "the paper's main table"): (arm, B) -> τ.
PAPER_TAU = {
    "gsm8k": {("jetflow", 64): 6.56, ("jetflow", 256): 8.62, ("dflash", 64): 6.18, ("dflash", 256): 7.77},
    "math500": {("jetflow", 64): 7.42, ("jetflow", 256): 10.76, ("dflash", 64): 7.16, ("dflash", 256): 9.81},
    "humaneval": {("jetflow", 64): 6.06, ("jetflow", 256): 7.78, ("dflash", 64): 5.57, ("dflash", 256): 6.96},
    "mt_bench": {("jetflow", 64): 4.77, ("jetflow", 256): 5.94, ("dflash", 64): 4.51, ("dflash", 256): 5.41},
}
# Claim 2, causal over diffusion head minus 1, by the loss weighting gamma: at gamma = 0 the paper's mean
# accepted lengths (9.46 / 4.84); at the other gammas it gives speed-ups only (MATH-500), whose ratio
# stands in for the τ ratio (the same engine and drafting cost).
PAPER_CAUSAL_GAIN = {0: 9.46 / 4.84 - 1, 3: 8.50 / 8.16 - 1, 7: 8.40 / 8.36 - 1, 15: 8.41 / 6.17 - 1}
COLUMNS = ["claim", "suite", "contrast", "seeds", "prompts", "effect", "lo", "hi", "paper", "reachable", "reachable_from",
           "verdict"]


@dataclass(frozen=True)
class Effect:
    """A measured effect and its 95% CI (same units as the paper's effect it is compared with)."""

    estimate: float
    lo: float
    hi: float


def verdict(effect: Effect, paper: float, reachable: float | None = None) -> str:
    """One of `VERDICTS` for ``effect`` against the paper's effect ``paper`` (non-zero, any sign).

    Oriented so that the paper's effect is positive (P = |paper|, the CI multiplied by its sign):
    untestable here when ``reachable`` (the largest effect the setup could show; None: unknown) is
    below P; else reproduced when the CI excludes zero on the paper's side and reaches P (lo > 0,
    hi >= P); contradicted when it excludes P from below (hi < P: the effect is smaller than the
    paper's, absent or reversed); inconclusive otherwise (the CI holds both zero and P).
    """
    if paper == 0 or not all(map(math.isfinite, (effect.lo, effect.hi))):
        raise ValueError(f"a verdict needs a non-zero paper effect and a finite CI, got {paper} and {effect}")
    sign = 1.0 if paper > 0 else -1.0
    lo, hi = sorted((sign * effect.lo, sign * effect.hi))
    size = abs(paper)
    if reachable is not None and reachable < size:
        return "untestable here"
    if lo > 0 and hi >= size:
        return "reproduced"
    if hi < size:
        return "contradicted"
    return "inconclusive"


def claim1_paper(suite: str) -> float:
    """The paper's difference of JetFlow / DFlash-T τ ratios, B = 256 minus B = 64."""
    t = PAPER_TAU[suite]
    return t["jetflow", 256] / t["dflash", 256] - t["jetflow", 64] / t["dflash", 64]


def load_requests(paths: Sequence[Path]) -> pd.DataFrame:
    """Per-request counts (run, seed, suite, drafter, variant, budget, request, steps, emitted) of run
    folders (requests.parquet) or collected claims folders (requests.csv.gz, one ``run`` column).

    A request's head seed is its variant's ``seed=k``, else the run name's ``-sK``, else 0.
    """
    from jetflow_bench.sweep.ablation import split_seed

    frames = []
    for path in paths:
        if (path / "requests.csv.gz").is_file():
            collected = pd.read_csv(path / "requests.csv.gz")
            frames.append(collected.assign(run=[f"{path}/{run}" for run in collected["run"]]))
        elif (path / "requests.parquet").is_file():
            columns = ["suite", "drafter", "variant", "budget", "request", "steps", "emitted"]
            frames.append(pd.read_parquet(path / "requests.parquet", columns=columns).assign(run=str(path)))
        else:
            raise JfbenchError(f"{path} holds neither requests.parquet (a run folder) nor requests.csv.gz (a collected "
                               "claims folder): pass one of those")
    rows = pd.concat(frames, ignore_index=True)
    split = [split_seed(v) for v in rows["variant"]]
    run_seed = [int(m.group(1)) if (m := re.search(r"-s(\d+)", Path(r).name)) else 0 for r in rows["run"]]
    return rows.assign(arm_variant=[v for v, _ in split], seed=[r if s is None else s for (_, s), r in zip(split, run_seed, strict=True)])


def runs_with(rows: pd.DataFrame, drafter: str, variant: str = "default") -> pd.DataFrame:
    """The rows of the runs that hold arm ``drafter[variant]``: a contrast pairs cells of one run per seed."""
    runs = rows.loc[(rows["drafter"] == drafter) & (rows["arm_variant"] == variant), "run"].unique()
    return rows[rows["run"].isin(runs)]


def _cell(rows: pd.DataFrame, drafter: str, variant: str, budget: int) -> pd.DataFrame:
    """(seeds x prompts) emitted and steps of one arm at one budget, a column per (count, request)."""
    cell = rows[(rows["drafter"] == drafter) & (rows["arm_variant"] == variant) & (rows["budget"] == budget)]
    twice = cell.groupby(["seed", "request"])["run"].nunique()
    if twice.gt(1).any():
        seed = twice[twice.gt(1)].index[0][0]
        runs = sorted(cell.loc[cell["seed"] == seed, "run"].unique())
        raise JfbenchError(f"{drafter}[{variant}] at B = {budget} has head seed {seed} in several runs "
                           f"({', '.join(runs)}): pass the folders of one experiment, one run per seed")
    return cell.pivot_table(index="seed", columns="request", values=["emitted", "steps"], aggfunc="sum")


@dataclass(frozen=True)
class Matched:
    """A matched-pair effect, how many seeds and prompts it pairs, and each cell's pooled τ."""

    effect: Effect
    seeds: int
    prompts: int
    taus: dict[str, float]


def matched_effect(rows: pd.DataFrame, cells: dict[str, tuple[str, str, int]], statistic: Callable[[dict], float],
                   n_boot: int = N_BOOT) -> Matched | None:
    """``statistic(τ by cell name)`` on the seeds and prompts every cell shares, with its bootstrap CI
    over seeds x prompts (one draw for every cell: a matched pair); None when a cell is missing."""
    pivots = {name: _cell(rows, *key) for name, key in cells.items()}
    if any(p.empty for p in pivots.values()):
        return None
    seeds = sorted(set.intersection(*(set(p.index) for p in pivots.values())))
    prompts = sorted(set.intersection(*(set(p["emitted"].columns) for p in pivots.values())))
    if not seeds or not prompts:
        return None
    counts = {name: (p["emitted"].loc[seeds, prompts].to_numpy(float), p["steps"].loc[seeds, prompts].to_numpy(float))
              for name, p in pivots.items()}
    taus = {name: float(tau(e.sum(), s.sum())) for name, (e, s) in counts.items()}
    draw_seeds, draw_prompts = bootstrap_draws(len(prompts), len(seeds), n_boot)
    pick = (draw_seeds[:, :, None], draw_prompts[:, None, :])
    boot = statistic({name: tau(e[pick].sum(axis=(1, 2)), s[pick].sum(axis=(1, 2))) for name, (e, s) in counts.items()})
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return Matched(Effect(statistic(taus), float(lo), float(hi)), len(seeds), len(prompts), taus)


def claim1(rows: pd.DataFrame, headroom: dict[tuple[str, str], float] | None = None,
           depth2: dict[str, float] | None = None) -> list[dict]:
    """Claim 1 per suite: (τ_J / τ_D at 256) − (τ_J / τ_D at 64), JetFlow as released against DFlash-T.

    ``reachable``: the largest such difference JetFlow's gain past B = 64 could make if DFlash-T
    gained nothing, (G − τ_J(64)) / τ_D(64), with G its τ_∞ (``headroom[suite, "jetflow"]``) where
    the run recorded it, else τ_J(64) + a_2 (``depth2[suite]``: past B = 64 the `accum` tree only
    adds guesses below depth 2, so the gain is capped near the depth-2 acceptance: an estimate).
    """
    out = []
    cells = {"j64": ("jetflow", "default", 64), "j256": ("jetflow", "default", 256),
             "d64": ("dflash", "default", 64), "d256": ("dflash", "default", 256)}
    for suite in sorted(rows["suite"].unique()):
        paired = runs_with(rows[rows["suite"] == suite], "dflash")
        found = matched_effect(paired, cells, lambda t: t["j256"] / t["d256"] - t["j64"] / t["d64"])
        if found is None or suite not in PAPER_TAU:
            continue
        point, reachable, source = found.taus, None, ""
        if headroom and (suite, "jetflow") in headroom:
            reachable, source = (headroom[suite, "jetflow"] - point["j64"]) / point["d64"], "tau_inf (headroom)"
        elif depth2 and suite in depth2:
            reachable, source = depth2[suite] / point["d64"], "a_2 at B = 64 (estimate)"
        out.append(_row("1", suite, "jetflow/dflash tau ratio, B 256 minus B 64", found, claim1_paper(suite), reachable,
                        source))
    return out


def claim2(rows: pd.DataFrame, gamma: int, causal: str | None = None, bidirectional: str = "head=bidirectional"
           ) -> list[dict]:
    """Claim 2 per suite and budget: τ of the causal head over the bidirectional one, minus 1 (the
    ablation's pair: ``jetflow[head=bidirectional]`` against the causal head at the same layout).
    ``causal`` None: the arm the ablation compared it with, ``layout=prefix`` where the run has one
    (a base on the packed layout, which a bidirectional head cannot train), else the base itself
    (jetflow's all-mask default trains either head, so the variant changes the mask alone)."""
    rows = runs_with(rows, "jetflow", bidirectional)
    reference = causal or ("layout=prefix" if rows["arm_variant"].eq("layout=prefix").any() else "default")
    return _causal_gain(rows, gamma, ("jetflow", reference), ("jetflow", bidirectional), "")


def claim2_twins(rows: pd.DataFrame, gamma: int) -> list[dict]:
    """Claim 2 from claim-1 runs whose dflash head is the jetflow head's bidirectional twin (the same
    recipe with the bidirectional mask, `check_twins`): ``jetflow`` against ``dflash``. With pass 1
    alone the two arms draft through one pipeline, so this is the ablation's pair without rerunning it."""
    return _causal_gain(runs_with(rows, "dflash"), gamma, ("jetflow", "default"), ("dflash", "default"),
                        " (dflash twin)")


def _causal_gain(rows: pd.DataFrame, gamma: int, causal: tuple[str, str], bidirectional: tuple[str, str], note: str
                 ) -> list[dict]:
    if gamma not in PAPER_CAUSAL_GAIN:
        raise JfbenchError(f"--gamma {gamma}: the paper reports gamma {sorted(PAPER_CAUSAL_GAIN)} only")
    out = []
    mine = rows[(rows["drafter"] == bidirectional[0]) & (rows["arm_variant"] == bidirectional[1])]
    for (suite, budget), _ in mine.groupby(["suite", "budget"]):
        cells = {"c": (*causal, budget), "b": (*bidirectional, budget)}
        found = matched_effect(rows[rows["suite"] == suite], cells, lambda t: t["c"] / t["b"] - 1)
        if found is not None:
            out.append(_row("2", suite, f"causal/bidirectional tau - 1{note}, B {budget}, gamma {gamma}", found,
                            PAPER_CAUSAL_GAIN[gamma], None, ""))
    return out


def check_twins(paths: Sequence[Path]) -> list[Path]:
    """Raise unless each run's dflash head is its jetflow head's bidirectional twin: both trained on
    all-mask blocks with one recipe but the mask (the resolved recipes of their `head_records`;
    ``stop_on_plateau`` may differ where neither head stopped on a plateau: then
    both ran to the same step or time limit). Returns the runs that could not be checked (no
    manifest, or no record of a head left)."""
    from drafters.block import dflash_all_mask
    from jetflow_bench.report.loading import head_records

    unchecked = []
    for path in paths:
        manifest = json.loads((path / "manifest.json").read_text()) if (path / "manifest.json").is_file() else {}
        heads = head_records(path, manifest)
        records = {name: heads.get(name, {}).get("training") or {} for name in ("dflash", "jetflow")}
        recipes = {name: record.get("recipe") or record.get("config") for name, record in records.items()}
        if not all(recipes.values()):
            unchecked.append(path)
            continue
        d, j = recipes["dflash"], recipes["jetflow"]
        plateau = any(record.get("stop_reason") == "plateau" for record in records.values())
        ignored = {"drafter", "head"} | (set() if plateau else {"stop_on_plateau"})
        differ = sorted(k for k in set(d) | set(j) if k not in ignored and d.get(k) != j.get(k))
        if differ or (d.get("head"), j.get("head")) != ("bidirectional", "causal") or not dflash_all_mask(d.get("layout")):
            raise JfbenchError(f"{path}: its dflash head is not the bidirectional twin of its jetflow head "
                               f"(their recorded recipes differ in {', '.join(differ) or 'head or layout'}); drop "
                               "--dflash-twin, or train the pair with one recipe (`jfbench train --drafter dflash|jetflow`)")
    return unchecked


def _row(claim: str, suite: str, contrast: str, found: Matched, paper: float, reachable: float | None, source: str
         ) -> dict:
    effect = found.effect
    return {"claim": claim, "suite": suite, "contrast": contrast, "seeds": found.seeds, "prompts": found.prompts,
            "effect": effect.estimate, "lo": effect.lo, "hi": effect.hi, "paper": paper,
            "reachable": np.nan if reachable is None else reachable, "reachable_from": source,
            "verdict": verdict(effect, paper, reachable)}


def depth2_acceptance(paths: Sequence[Path]) -> dict[str, float]:
    """Per suite, JetFlow's a_2 at B = 64 pooled (step-weighted) over the summaries of the runs that claim 1
    pairs (those with a dflash arm)."""
    frames = []
    for path in paths:
        for summary in [*path.glob("*/summary.csv"), path / "summary.csv"]:
            frame = pd.read_csv(summary) if summary.is_file() else None
            if frame is not None and frame["drafter"].eq("dflash").any():
                frames.append(frame)
    if not frames:
        return {}
    rows = pd.concat(frames)
    rows = rows[(rows["drafter"] == "jetflow") & (rows["variant"] == "default") & (rows["budget"] == 64)]
    if "a_2" not in rows:
        return {}
    return {suite: float((g["a_2"] * g["n_steps"]).sum() / g["n_steps"].sum()) for suite, g in rows.groupby("suite")}


def tau_inf(paths: Sequence[Path]) -> dict[tuple[str, str], float]:
    """(suite, drafter) -> τ_∞ of the default arm, from the run folders that recorded marginals."""
    from jetflow_bench.report.headroom import INF, headroom_table

    found = {}
    for path in paths:
        if not (path / "marginals.parquet").is_file():
            continue
        table = headroom_table(pd.read_parquet(path / "marginals.parquet"), pd.read_parquet(path / "steps.parquet"),
                               pd.read_parquet(path / "requests.parquet"))
        for row in table[table["budget"] == INF].itertuples():
            found[row.suite, row.arm] = row.tau_replayed
    return found


def claims_table(paths: Sequence[Path], gamma: int = 7, dflash_twin: bool = False) -> pd.DataFrame:
    """Claims 1 and 2 from run folders or collected claims folders, one row per suite and contrast;
    ``dflash_twin``: claim 2 also pairs each run's jetflow arm with its dflash arm (`claim2_twins`)."""
    rows = load_requests(paths)
    twins = claim2_twins(rows, gamma) if dflash_twin else []
    table = pd.DataFrame(claim1(rows, tau_inf(paths), depth2_acceptance(paths)) + claim2(rows, gamma) + twins,
                         columns=COLUMNS)
    if table.empty:
        raise JfbenchError(f"{', '.join(map(str, paths))}: no claim can be computed: claim 1 needs jetflow and dflash at "
                           "B = 64 and 256, claim 2 jetflow[head=bidirectional] and its causal pair (or, with --dflash-twin, jetflow and dflash)")
    return table
