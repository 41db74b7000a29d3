"""The paper's four claims, as measured: tables from the issue-13 runs recorded in ``claims/``.

    python claims_table.py collect RUNS_DIR claims/   # once, from the raw run folders
    python claims_table.py table claims/              # prints the markdown tables

``collect`` copies each run's manifest (its data folder written as ``<JFBENCH_DATA_DIR>``),
summary and, for ablations, ``ablation.csv``, and keeps every run's per-request counts in
``requests.csv.gz``: enough to recompute every τ and its bootstrap CI without the multi-megabyte
parquet files. ``table`` then prints

1. τ per arm and budget (pooled over head seeds), τ(256)/τ(16) with a 95% bootstrap CI over
   seeds × prompts and the per-seed spread, and the τ ratio of arm pairs at each budget
   (JetFlow / DFlash-T, ...); τ at 512 / 1024 (the ``ext-`` runs) beside the same head's 16 / 64 /
   256 on the same prompts;
2. the ablations' Δτ with their CIs (computed by ``jfbench ablate``, copied as they are), plus the
   training layout's own effect (``layout.csv``: the head ablation's reference arm, prefix layout,
   against the default, packed; the same delta code);
3. where each arm's acceptance comes from: a_1 and the conditional p_d = a_d / a_(d-1) for d = 2..4,
   pooled over head seeds (step-weighted: a_d = Σ n_steps · a_d / Σ n_steps over the seeds' cells);
4. divergences from the AR output in every run (unexcused and excused).

``collect`` also writes each run's ``heads.csv`` (every arm's head: steps trained, held-out proxy,
converged or not, from the head's own record; relative checkpoint paths resolve against
``--cwd``), and ``table`` marks every arm and ablation row with how many of its heads converged, so
no cell silently rests on a head that was still learning. Runs collected before this have no
``heads.csv`` and say "not recorded".
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from jetflow_bench.measure.metrics import bootstrap_draws, rate, tau
from jetflow_bench.sweep.ablation import split_seed
from jetflow_bench.training.loop import plateaued

ARMS = ("jetflow", "jetflow-refine", "dflash", "eagle")
REQUEST_COLUMNS = ["suite", "drafter", "variant", "budget", "request", "steps", "emitted", "lossless", "excused"]
HEAD_COLUMNS = ["drafter", "variant", "checkpoint", "steps_done", "stop_reason", "heldout_accept_len", "converged"]
N_BOOT = 2000


def head_records(manifest: dict, cwd: Path) -> pd.DataFrame:
    """One row per arm with a head: how long it trained and whether its held-out proxy had plateaued."""
    rows = []
    for spec in manifest["config"]["drafters"]:
        if not spec.get("checkpoint"):
            continue
        path = Path(spec["checkpoint"]) if Path(spec["checkpoint"]).is_absolute() else cwd / spec["checkpoint"]
        training = json.loads((path / "config.json").read_text()).get("training") or {}
        rows.append({"drafter": spec["name"], "variant": spec["variant"], "checkpoint": spec["checkpoint"],
                     **{k: training.get(k) for k in HEAD_COLUMNS[3:-1]},
                     "converged": plateaued(training["heldout"]) if training.get("heldout") else None})  # today's rule
    return pd.DataFrame(rows, columns=HEAD_COLUMNS)


def collect(runs: Path, out: Path, cwd: Path) -> None:
    """Copy the small files of every run under ``runs`` into ``out``, with their requests trimmed."""
    frames = []
    for run in sorted(p for p in runs.iterdir() if (p / "manifest.json").exists()):
        if not re.fullmatch(r"(main-s\d+|ext-s\d+|abl-\w+)(-[\w-]+)?", run.name):
            continue
        dest = out / run.name
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("summary.csv", "ablation.csv"):
            if (run / name).exists():
                shutil.copy(run / name, dest / name)
        manifest = (run / "manifest.json").read_text()
        data_dir = json.loads(manifest).get("data_dir")
        (dest / "manifest.json").write_text(manifest.replace(data_dir, "<JFBENCH_DATA_DIR>") if data_dir else manifest)
        head_records(json.loads(manifest), cwd).to_csv(dest / "heads.csv", index=False)
        requests = pd.read_parquet(run / "requests.parquet")
        if run.name.startswith("abl-"):
            layout_effect(requests).to_csv(dest / "layout.csv", index=False)
        frames.append(requests[REQUEST_COLUMNS].assign(run=run.name))
    pd.concat(frames).to_csv(out / "requests.csv.gz", index=False)


def layout_effect(requests: pd.DataFrame) -> pd.DataFrame:
    """The head ablation's reference arm (the causal head trained on the prefix layout) against the
    default (the same head on the packed layout): one factor, the training layout. `jfbench ablate`
    gives a reference arm no row of its own, so this asks its delta table for that one contrast."""
    from jetflow_bench.sweep.ablation import Comparison, ablation_table

    table = ablation_table(requests, comparisons={"layout=prefix": Comparison("layout=prefix", "layout=prefix")})
    return table[table["variant"] == "layout=prefix"]


def _tau(emitted: np.ndarray, steps: np.ndarray) -> np.ndarray:
    return tau(emitted.sum(axis=-1), steps.sum(axis=-1))


def tau_ratio(requests: pd.DataFrame, suite: str, top: tuple[str, int], bottom: tuple[str, int]) -> dict[str, float]:
    """τ of cell ``top`` over τ of cell ``bottom`` ((arm, budget) each), pooled over head seeds, with a
    bootstrap CI that resamples seeds and prompts together (the same draw for both cells, so prompt
    difficulty and the seed cancel), and the ratio of each seed alone."""
    rows = requests[(requests["suite"] == suite) & requests["run"].str.startswith("main-")]

    def counts(arm: str, budget: int) -> tuple[np.ndarray, np.ndarray]:
        cell = rows[(rows["drafter"] == arm) & (rows["budget"] == budget)]
        table = cell.pivot_table(index="run", columns="request", values=["emitted", "steps"], aggfunc="sum")
        return table["emitted"].to_numpy(float), table["steps"].to_numpy(float)  # (seeds, prompts)

    (e_top, s_top), (e_bot, s_bot) = counts(*top), counts(*bottom)
    n_seeds, n = e_top.shape
    seeds, prompts = bootstrap_draws(n, n_seeds, N_BOOT)
    seeds, prompts = seeds[:, :, None], prompts[:, None, :]

    def pick(a: np.ndarray) -> np.ndarray:  # (draws, seeds x prompts)
        return a[seeds, prompts].reshape(N_BOOT, -1)

    point = _tau(e_top.ravel(), s_top.ravel()) / _tau(e_bot.ravel(), s_bot.ravel())
    lo, hi = np.percentile(_tau(pick(e_top), pick(s_top)) / _tau(pick(e_bot), pick(s_bot)), [2.5, 97.5])
    per_seed = _tau(e_top, s_top) / _tau(e_bot, s_bot)
    return {"ratio": float(point), "lo": float(lo), "hi": float(hi), "seed_min": float(per_seed.min()),
            "seed_max": float(per_seed.max())}


def _ratio_cell(r: dict[str, float]) -> str:
    return f"{r['ratio']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}] (seeds {r['seed_min']:.2f} – {r['seed_max']:.2f})"


def _taus(rows: pd.DataFrame) -> dict[int, float]:
    per_budget = rows.groupby("budget")[["emitted", "steps"]].sum()
    return dict(zip(per_budget.index, tau(per_budget["emitted"], per_budget["steps"]).tolist(), strict=True))


def converged_cell(claims: Path, runs: str, drafter: str, variant: str | None = None) -> str:
    """"k / n" heads of this arm (over the ``runs`` glob's runs, i.e. head seeds) whose held-out proxy
    had plateaued; "not recorded" for runs collected without ``heads.csv``."""
    paths = sorted(claims.glob(f"{runs}/heads.csv"))
    if not paths:
        return "not recorded"
    heads = pd.concat(pd.read_csv(p) for p in paths)
    heads = heads[(heads["drafter"] == drafter.removesuffix("-refine")) if variant is None else
                  (heads["variant"].map(lambda v: split_seed(v)[0]) == variant)]
    heads = heads.drop_duplicates("checkpoint")
    return f"{int(heads['converged'].fillna(False).astype(bool).sum())} / {len(heads)}"


def tau_table(requests: pd.DataFrame, suite: str, claims: Path) -> list[str]:
    """Claim 1 and EAGLE: τ by budget, and how far it grows from 16 to 256."""
    main = requests[requests["run"].str.startswith("main-") & (requests["suite"] == suite)]
    lines = [f"| arm ({suite}) | τ@16 | τ@64 | τ@256 | τ(256)/τ(16) [95% CI] | heads converged |",
             "| --- | --- | --- | --- | --- | --- |"]
    for arm in ARMS:
        tau = _taus(main[main["drafter"] == arm])
        if tau:
            lines.append(f"| {arm} | {' | '.join(f'{tau[b]:.2f}' for b in (16, 64, 256))} | "
                         f"{_ratio_cell(tau_ratio(requests, suite, (arm, 256), (arm, 16)))} | "
                         f"{converged_cell(claims, 'main-*', arm)} |")
    return lines


def extension_table(requests: pd.DataFrame) -> list[str]:
    """Budgets 512 / 1024 (the ``ext-s<seed>`` runs) beside the same head's 16 / 64 / 256 on the same prompts."""
    if not requests["run"].str.startswith("ext-").any():
        return []
    lines = ["| arm (suite, head seed, prompts) | τ@16 | τ@64 | τ@256 | τ@512 | τ@1024 |", "| --- | --- | --- | --- | --- | --- |"]
    for (run, suite, arm), ext in requests[requests["run"].str.startswith("ext-")].groupby(["run", "suite", "drafter"]):
        if arm == "ar":
            continue
        seed = re.match(r"ext-s(\d+)", run).group(1)
        same = requests[requests["run"].str.fullmatch(rf"main-s{seed}(-[\w-]+)?") & (requests["suite"] == suite)
                        & (requests["drafter"] == arm) & requests["request"].isin(ext["request"].unique())]
        tau = {**_taus(same), **_taus(ext)}
        cells = " | ".join(f"{tau[b]:.2f}" if b in tau else "–" for b in (16, 64, 256, 512, 1024))
        lines.append(f"| {arm} ({suite}, seed {seed}, first {ext['request'].nunique()}) | {cells} |")
    return lines


def head_to_head(requests: pd.DataFrame, suite: str, pairs: tuple[tuple[str, str], ...] = (
        ("jetflow", "dflash"), ("jetflow-refine", "jetflow"), ("eagle", "jetflow"))) -> list[str]:
    """τ of one arm over another's at each budget: does the gap widen with the budget?"""
    lines = [f"| τ ratio ({suite}) | B = 16 | B = 64 | B = 256 |", "| --- | --- | --- | --- |"]
    present = set(requests.loc[requests["run"].str.startswith("main-") & (requests["suite"] == suite), "drafter"])
    for top, bottom in (pair for pair in pairs if set(pair) <= present):
        cells = [_ratio_cell(tau_ratio(requests, suite, (top, b), (bottom, b))) for b in (16, 64, 256)]
        lines.append(f"| {top} / {bottom} | {' | '.join(cells)} |")
    return lines


def conditional_table(claims: Path, suite: str, depths: int = 4) -> list[str]:
    """a_1 and the conditional p_2..p_depths per arm and budget, pooled over the ``main-`` runs' seeds:
    does a lead come from the first token or from deeper, path-conditioned acceptance?"""
    frames = [pd.read_csv(path) for path in sorted(claims.glob("main-*/summary.csv"))]
    rows = pd.concat(frames)
    rows = rows[(rows["suite"] == suite) & rows["drafter"].isin(ARMS)]
    head = " | ".join(["a_1", *(f"p_{d}" for d in range(2, depths + 1))])
    lines = [f"| arm ({suite}) | B | {head} |", "| --- | --- |" + " --- |" * depths]
    for (arm, budget), cell in rows.groupby(["drafter", "budget"]):
        at_least = [1.0] + [float(rate((cell["n_steps"] * cell[f"a_{d}"]).sum(), cell["n_steps"].sum()))
                            for d in range(1, depths + 1)]  # pooled a_0 = 1, a_1, ..., a_depths
        p_d = [float(rate(at_least[d], at_least[d - 1])) for d in range(2, depths + 1)]  # NaN after a_(d-1) = 0
        cells = [f"{at_least[1]:.2f}"] + [f"{p:.2f}" if p == p else "–" for p in p_d]
        lines.append(f"| {arm} | {budget} | {' | '.join(cells)} |")
    return lines


def ablation_lines(claims: Path) -> list[str]:
    """Claims 2-4: every ablation row as `jfbench ablate` computed it."""
    lines = ["| suite | B | variant | compared with | τ variant | τ compared | Δτ [95% CI, seeds × prompts] | Δτ per seed "
             "| heads converged (variant; compared) |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for path in sorted([*claims.glob("abl-*/ablation.csv"), *claims.glob("abl-*/layout.csv")]):
        run = path.parent.name
        for row in pd.read_csv(path).itertuples():
            heads = f"{converged_cell(claims, run, row.drafter, row.variant)}; {converged_cell(claims, run, row.drafter, row.compared_with)}"
            lines.append(f"| {row.suite} | {row.budget} | {row.variant} | {row.compared_with} | {row.tau:.2f} | "
                         f"{row.tau_default:.2f} | {row.tau_delta:+.2f} [{row.tau_delta_lo:+.2f}, {row.tau_delta_hi:+.2f}] | "
                         f"{row.tau_delta_seed_min:+.2f} … {row.tau_delta_seed_max:+.2f} | {heads} |")
    return lines


def divergence_lines(claims: Path) -> list[str]:
    lines = ["| run | cells | requests | unexcused divergences | excused (fp near-ties) |", "| --- | --- | --- | --- | --- |"]
    for path in sorted(claims.glob("*/summary.csv")):
        s = pd.read_csv(path)
        lines.append(f"| {path.parent.name} | {len(s)} | {int(s['n_requests'].sum())} | "
                     f"{int(s['lossless_unexcused'].sum())} | {int(s['lossless_excused'].sum())} |")
    return lines


def table(claims: Path) -> None:
    requests = pd.read_csv(claims / "requests.csv.gz")
    for suite in sorted(requests["suite"].unique()):
        print("\n".join(tau_table(requests, suite, claims)), end="\n\n")
        print("\n".join(head_to_head(requests, suite)), end="\n\n")
        print("\n".join(conditional_table(claims, suite)), end="\n\n")
    if ext := extension_table(requests):
        print("\n".join(ext), end="\n\n")
    print("\n".join(ablation_lines(claims)), end="\n\n")
    print("\n".join(divergence_lines(claims)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect", help="copy the small files of the raw runs")
    c.add_argument("runs", type=Path)
    c.add_argument("out", type=Path)
    c.add_argument("--cwd", type=Path, default=Path("."), help="where the runs were started (relative head paths)")
    t = sub.add_parser("table", help="print the tables")
    t.add_argument("claims", type=Path)
    args = parser.parse_args()
    collect(args.runs, args.out, args.cwd) if args.command == "collect" else table(args.claims)


if __name__ == "__main__":
    main()
