"""The load tables (`jfbench show RUN --table load`): latency percentiles, goodput and speed-ups per
load level, the break-even load of every arm and budget, and the best budget at each level.

Speed-ups divide plain decoding's figure at the same load (same suite, batch size, temperature,
repeat and arrival times; the arm's own engine's plain decoding, its cells' ``baseline``: vllm:none
for vLLM arms, jfbench's AR otherwise), timed in the same session as the arm (the sweep records
it on each of the arm's rows: ``base_decode_s``, and the cell's ``base_wall_s``), by the arm's.
TPOT speed-up: mean TPOT of plain decoding / the arm's, over the same requests (pooled over repeats), with a
paired bootstrap 95% CI over requests (`metrics.paired_ratio_ci`, micro); plain decoding's TPOT is
its paired decode time over its own output tokens - 1. The CI's bootstrap draws repeats, then
requests. The A/A noise floor beside it is plain decoding against its second copy, served in the
same repeat (the same requests' TPOTs, same CI); a speed-up whose CI overlaps that band is not told
apart from noise (`clear_of_noise`). Throughput speed-up: output tokens/s of
the arm / plain decoding's, averaged over repeats (one figure per serving run: no per-request
CI). Cells without paired times (a τ-only run, one recorded before in-session pairing) get none. The
break-even load of an arm × budget is the lowest level of a load kind at which the TPOT speed-up's
CI reaches 1 (its lower bound <= 1) or the A/A band: from there on speculation is no longer shown to pay.
Beside it, the levels where the speed-up is shown to pay (CI above 1 and clear of the band): an arm
that pays only at higher loads has a break-even at the lowest level, and this column says where it does.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from jetflow_bench.core.arms import AR_ARM, DEFAULT_VARIANT, arm_label
from jetflow_bench.core.budget_policy import AUTO_COLUMN
from jetflow_bench.measure.metrics import clear_of_noise, paired_ratio_ci, tau
from jetflow_bench.measure.serving import latency_stats

ARM = ["suite", "drafter", "variant", "budget", "batch_size", "temperature"]
LEVEL = [*ARM, "load"]
SPEEDUP_COLUMNS = ("tpot_speedup", "tpot_speedup_lo", "tpot_speedup_hi", "tput_speedup", "noise_aa", "noise_aa_lo",
                   "noise_aa_hi")
PLAIN = {"drafter": AR_ARM, "variant": DEFAULT_VARIANT, "budget": 1}  # the baseline's keys (drafter: `_baseline`)


def load_level(load: str) -> tuple[str, float]:
    """'poisson:2' -> ('poisson', 2.0); 'poisson:inf' -> ('poisson', inf)."""
    kind, _, level = load.partition(":")
    return kind, float(level)


def cell_latency(requests: pd.DataFrame, cells: pd.DataFrame, slo: Mapping[str, float]) -> pd.DataFrame:
    """One row per load cell (every repeat): `measure.serving.latency_stats` over its requests."""
    rows = []
    wall = cells.set_index([*LEVEL, "repeat"])["wall_s"]
    for key, group in requests[requests["load"] != ""].groupby([*LEVEL, "repeat"], sort=False):
        rows.append({**dict(zip([*LEVEL, "repeat"], key, strict=True)), "n_requests": len(group),
                     "tau": float(tau(group["emitted"].sum(), group["steps"].sum())),
                     **latency_stats(group, float(wall.loc[key]), slo)})
    return pd.DataFrame(rows)


def load_table(requests: pd.DataFrame, cells: pd.DataFrame, slo: Mapping[str, float], n_boot: int = 1000,
               seed: int = 0) -> pd.DataFrame:
    """One row per arm × budget × load level (repeats pooled): latency stats (means over repeats),
    τ, goodput, and the TPOT and throughput speed-ups over plain decoding at that load."""
    per_cell = cell_latency(requests, cells, slo)
    if per_cell.empty:
        return per_cell
    numeric = [c for c in per_cell.columns if c not in (*LEVEL, "repeat")]
    table = per_cell.groupby(LEVEL, sort=False)[numeric].mean().reset_index()
    loaded = requests[requests["load"] != ""]
    speedups = []
    for _, row in table.iterrows():
        arm_cells = _select(cells, row)
        arm, base = _select(loaded, row), _select(loaded, {**row, **PLAIN, "drafter": _baseline(arm_cells)})
        speedups.append(_speedups(arm, base, arm_cells, n_boot, seed))
    table = pd.concat([table, pd.DataFrame(speedups)], axis=1)
    table["clear_of_noise"] = clear_of_noise(table["tpot_speedup_lo"], table["tpot_speedup_hi"], table["noise_aa_lo"],
                                             table["noise_aa_hi"])
    kinds = table["load"].map(load_level)
    table["load_kind"], table["load_level"] = [k for k, _ in kinds], [v for _, v in kinds]
    return table.sort_values([*ARM, "load_kind", "load_level"]).reset_index(drop=True)


def _speedups(arm: pd.DataFrame, base: pd.DataFrame, arm_cells: pd.DataFrame, n_boot: int, seed: int) -> dict[str, float]:
    """An arm's TPOT and throughput speed-ups over the plain-decoding times paired with its rows, and
    the A/A noise floor timed beside it (module docstring); plain decoding's token counts are its own
    cells' (they do not depend on timing)."""
    none = dict.fromkeys(SPEEDUP_COLUMNS, np.nan)
    if "base_decode_s" not in arm or arm["base_decode_s"].isna().any():
        return none
    tokens = base.set_index(["repeat", "request"])["new_tokens"]
    pairs = arm.assign(base_tokens=tokens.reindex(pd.MultiIndex.from_frame(arm[["repeat", "request"]])).to_numpy())
    pairs = pairs[(pairs["base_tokens"] > 1) & pairs["tpot_s"].notna()]
    base_tpot = pairs["base_decode_s"] / (pairs["base_tokens"] - 1)
    aa_tpot = pairs.get("aa_decode_s", pd.Series(np.nan, index=pairs.index)) / (pairs["base_tokens"] - 1)
    tpot = _ratio(pairs, base_tpot, pairs["tpot_s"], n_boot, seed)
    aa = _ratio(pairs, base_tpot, aa_tpot, n_boot, seed)  # plain decoding against itself: NaN where never timed twice
    wall = arm_cells.set_index("repeat")
    own = arm.groupby("repeat")["new_tokens"].sum() / wall["wall_s"]
    plain = base.groupby("repeat")["new_tokens"].sum() / wall.get("base_wall_s", np.nan)
    return {"tpot_speedup": tpot["micro"], "tpot_speedup_lo": tpot["micro_lo"], "tpot_speedup_hi": tpot["micro_hi"],
            "tput_speedup": float((own / plain).mean()),
            "noise_aa": aa["micro"], "noise_aa_lo": aa["micro_lo"], "noise_aa_hi": aa["micro_hi"]}


def _ratio(pairs: pd.DataFrame, base: pd.Series, method: pd.Series, n_boot: int, seed: int) -> dict[str, float]:
    """`paired_ratio_ci` of two per-request columns laid out repeats x requests, so that the CI
    covers the drift between repeats as well as the requests' spread."""
    frame = pd.DataFrame({"repeat": pairs["repeat"], "request": pairs["request"], "base": base, "method": method})
    matrix = {side: frame.pivot(index="repeat", columns="request", values=side).to_numpy(dtype=float) for side in ("base", "method")}
    return paired_ratio_ci(matrix["base"], matrix["method"], n_boot, seed)


def _baseline(arm_cells: pd.DataFrame) -> str:
    """The plain-decoding arm ``arm_cells`` were paired with (their ``baseline``: vllm:none for vLLM arms)."""
    named = arm_cells["baseline"].dropna() if "baseline" in arm_cells else ()
    return str(named.iloc[0]) if len(named) else AR_ARM


def _select(frame: pd.DataFrame, keys: Mapping) -> pd.DataFrame:
    mask = np.ones(len(frame), dtype=bool)
    for k in LEVEL:
        mask &= (frame[k] == keys[k]).to_numpy()
    return frame[mask]


def break_even(table: pd.DataFrame) -> pd.DataFrame:
    """Per arm × budget × load kind: the lowest level where the TPOT speed-up is no longer shown to
    pay: its CI reaches 1, or overlaps the A/A noise band timed beside it; and every level where it is
    shown to pay (``pays_at``), which the break-even alone hides for an arm that pays only under load."""
    rows = []
    arms = table[table["drafter"] != AR_ARM]
    for key, group in arms.groupby([*ARM, "load_kind"], sort=False):
        group = group.sort_values("load_level")
        not_shown = (group["tpot_speedup_lo"] <= 1) | group["clear_of_noise"].eq(False)
        reached = group[not_shown]
        levels = group["load"].tolist()
        pays = group.loc[~not_shown & group["tpot_speedup_lo"].notna(), "load"].tolist()
        if reached.empty:
            text = f"> {levels[-1]} (pays at every level)"
        elif reached.index[0] == group.index[0]:
            text = f"<= {levels[0]} (not shown to pay at {'the lowest' if pays else 'any'} level)"
        else:
            text = str(reached["load"].iloc[0])
        arm = dict(zip([*ARM, "load_kind"], key, strict=True))
        rows.append({**arm, "arm": arm_label(arm["drafter"], arm["variant"]), "break_even": text,
                     "pays_at": ",".join(pays) or "none",
                     "speedup_at_lowest": float(group["tpot_speedup"].iloc[0]),
                     "speedup_at_highest": float(group["tpot_speedup"].iloc[-1])})
    return pd.DataFrame(rows)


def best_budgets(table: pd.DataFrame, summary: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per drafter arm and load level: the static budget with the highest TPOT speed-up, and beside
    it the same arm's `--budgets auto` cell at that level when the grid has one (its speed-up, and
    the share of steps at each budget it chose, from ``summary``'s ``chosen_budgets``): whether the
    policy follows the best static budget as the load rises. ``auto_tied``: auto's CI overlaps the
    best static budget's."""
    keys = ["suite", "drafter", "variant", "batch_size", "temperature", "load_kind", "load_level", "load"]
    arms = table[table["drafter"] != AR_ARM].dropna(subset=["tpot_speedup"])
    static, auto = arms[arms["budget"] != AUTO_COLUMN], arms[arms["budget"] == AUTO_COLUMN]
    best = static.loc[static.groupby(keys, sort=False)["tpot_speedup"].idxmax()]
    best = best[[*keys, "budget", "tpot_speedup", "tpot_speedup_lo", "tpot_speedup_hi"]].reset_index(drop=True)
    if auto.empty:
        return best
    auto = auto[keys + ["tpot_speedup", "tpot_speedup_lo", "tpot_speedup_hi"]].rename(
        columns={c: f"auto_{c.removeprefix('tpot_')}" for c in ("tpot_speedup", "tpot_speedup_lo", "tpot_speedup_hi")})
    if summary is not None and "chosen_budgets" in summary:
        chosen = summary[summary["budget"] == AUTO_COLUMN].dropna(subset=["chosen_budgets"])
        chosen = chosen.groupby([k for k in keys if k in chosen and not k.startswith("load_")], sort=False)["chosen_budgets"].first()
        auto = auto.merge(chosen.reset_index(), how="left")
    best = best.merge(auto, on=keys, how="outer")
    tied = (best["auto_speedup_lo"] <= best["tpot_speedup_hi"]) & (best["auto_speedup_hi"] >= best["tpot_speedup_lo"])
    best["auto_tied"] = tied.astype("boolean").mask(best[["auto_speedup_lo", "tpot_speedup_lo"]].isna().any(axis=1))
    return best
