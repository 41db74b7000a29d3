"""`jfbench project RUN --policy auto`: the per-step budget policy replayed offline on a finished run.

Source: for every suite × drafter × variant, the run's static cell with the largest budget B_max
(first repeat, the measured batch size nearest 1) and its `nodes.parquet` rows — per sequence-step,
the verified tree's nodes in build order with their score and whether the target accepted them.
Because accum, best-first and spine-first trees are built in a budget-independent order, the first
B nodes are the tree budget B would have built from the same state, so for every recorded step and
every candidate B <= B_max:

    tokens(step, B) = 1 + #(accepted nodes among the first B)         (the bonus token included)

Replay at projected batch size b: the recorded sequence-steps, ordered by (step, request), are
grouped b at a time as the rows of one batched step. A static budget B verifies every group at B;
`auto` asks `BudgetPolicy` per group — expected tokens from the online calibration (the prior, then
updated with each group's recorded nodes), cost from the `CostModel` — and then earns the recorded
tokens of the prefix it chose. Every arm is priced by the same model:

    step_s(B, b) = t_draft(b) + t_verify(N_B, b) + bookkeeping(N_B, b),   N_B = min(B, largest tree in the group)
    speed-up     = (Σ tokens / Σ step_s) / (b / t_AR(b))

t_draft at B: the draft counters of the run's cell at B when the run has one, else B_max's. Static
B pays t_draft(B); `auto` pays t_draft at the budget it drafted at (`BudgetPolicy.draft_budget`:
its previous choice, the largest candidate every 8th step). Counterfactual, not a
re-run: each recorded step is a state the decode passed through; a smaller budget would have
passed through other states (fewer accepted tokens per step, more steps). The stop rule is ignored
(raw acceptance). Trees of drafters whose later passes depend on the budget (jetflow-refine's
refinement of the pass-1 tree) are not prefix-ordered: their replay is an approximation, and so is
`--budgets auto` for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from jetflow_bench.core.arms import AR_ARM
from jetflow_bench.core.budget_policy import AUTO_COLUMN, BudgetPolicy, budget_label
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.projection.cost import CostModel
from jetflow_bench.projection.project import _cells, _specs, head_info
from jetflow_bench.projection.shapes import head_shape
from jetflow_bench.report.loading import REBUILD, Run

ARM = ["suite", "drafter", "variant"]


def _steps(nodes: pd.DataFrame) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per recorded sequence-step, ordered by (step, request): (scores with the root's 0 first,
    accepted flags of the drafted nodes), nodes in build order."""
    steps = []
    for _, group in nodes.sort_values(["step", "request", "node"]).groupby(["step", "request"], sort=True):
        steps.append((np.concatenate([[0.0], group["score"].to_numpy(dtype=float)]), group["accepted"].to_numpy(bool)))
    return steps


def _draft_s(model: CostModel, cell: pd.Series, head: Any, batch: int) -> float:
    passes, entries = float(cell["draft_passes"]), float(cell["draft_entries"])
    if passes == 0 or np.isnan(passes):  # host drafting: the run's measured seconds per sequence-step
        host = float(cell["host_draft_s"]) / int(cell["batch_size"])
        return 0.0 if np.isnan(host) else host * batch
    if head is None:
        raise JfbenchError(
            f"drafter {cell['drafter']!r} runs a head but its config.json is not found (checkpoint moved?): "
            "pass --head-layers N (and --head-taps K)"
        )
    return model.draft_s(head, passes, entries, batch)


def replay_arm(
    steps: list[tuple[np.ndarray, np.ndarray]], candidates: Sequence[int], batch: int, model: CostModel,
    draft_s: dict[int, float],
) -> list[dict[str, Any]]:
    """Rows for `auto` and every static candidate at one batch size (module docstring);
    ``draft_s[B]`` = drafting seconds of one batched step drafted at budget B."""
    groups = [steps[i : i + batch] for i in range(0, len(steps), batch)]

    def step_cost(n: int, b: int) -> float:
        return model.verify_s(n, b) + model.bookkeeping_s(n, b)

    totals = {B: [0.0, 0.0] for B in candidates}  # B -> [tokens, seconds]
    policy = BudgetPolicy(tuple(candidates), step_cost, draft_s=dict(draft_s))  # drafting priced, not learned
    auto_tokens, auto_s, chosen = 0.0, 0.0, []
    for group in groups:
        longest = max(len(scores) for scores, _ in group)
        earned = {B: sum(1 + int(acc[: B - 1].sum()) for _, acc in group) for B in candidates}
        for B in candidates:
            totals[B][0] += earned[B]
            totals[B][1] += step_cost(min(B, longest), len(group)) + draft_s[B]
        drafted_at = policy.draft_budget()
        pick = policy.choose([scores for scores, _ in group])
        policy.seen_steps += 1
        chosen.append(pick)
        auto_tokens += earned[pick]
        auto_s += step_cost(min(pick, longest), len(group)) + draft_s[drafted_at]
        for scores, acc in group:  # every recorded node's fate is known: learn from all of them
            policy.calibration.update(scores[1:], acc)
    sequence_steps = len(steps)
    ar_rate = batch / model.ar_s(batch)
    rows = [{"policy": budget_label(B), "budget": B, "tau": tokens / sequence_steps,
             "tokens_per_s": tokens / seconds, "speedup": tokens / seconds / ar_rate, "chosen_budgets": ""}
            for B, (tokens, seconds) in totals.items()]
    shares = pd.Series(chosen).value_counts(normalize=True).sort_index()
    rows.append({"policy": "auto", "budget": AUTO_COLUMN, "tau": auto_tokens / sequence_steps,
                 "tokens_per_s": auto_tokens / auto_s, "speedup": auto_tokens / auto_s / ar_rate,
                 "chosen_budgets": ",".join(f"{int(b)}:{s:.2f}" for b, s in shares.items())})
    return rows


def replay_run(
    run: Run, model: CostModel, batch_sizes: list[int], candidates: Sequence[int],
    head_layers: int | None = None, head_taps: int | None = None, hardware: str = "",
) -> tuple[pd.DataFrame, list[str]]:
    """The policy replay table: per suite × drafter × variant × batch size, one row per static
    candidate and one for `auto`, with `best_static` and `auto_vs_best_static` (speed-up ratio)."""
    nodes = run.nodes
    if nodes is None:
        raise JfbenchError(
            f"run {str(run.path)!r} has no readable nodes.parquet (per-node scores and acceptance): re-run the sweep "
            "with this jfbench and a drafter whose node scores are log-probs (eagle, dflash, jetflow); a damaged "
            f"file: {REBUILD}"
        )
    cells = _cells(run)
    cells = cells[cells["budget"] != AUTO_COLUMN]
    specs, rows, notes = _specs(run), [], []
    for (suite, drafter, variant), arm in nodes[nodes["budget"] != AUTO_COLUMN].groupby(ARM):
        if drafter == AR_ARM:
            continue
        b_max = int(arm["budget"].max())
        usable = tuple(sorted(c for c in candidates if c <= b_max))
        if len(usable) < len(set(candidates)):
            notes.append(f"{drafter}: largest recorded budget is {b_max}; candidates above it are left out")
        source = arm[arm["budget"] == b_max]
        source = source[(source["repeat"] == source["repeat"].min())]
        source = source[source["batch_size"] == source["batch_size"].min()]
        steps = _steps(source)
        spec = specs.get((drafter, variant), {"name": drafter, "variant": variant})
        info = head_info(spec, run, head_layers, head_taps)
        head = head_shape(model.target, info.layers, info.taps) if info else None
        mine = cells[(cells["suite"] == suite) & (cells["drafter"] == drafter) & (cells["variant"] == variant)]
        by_budget = {int(r["budget"]): r for _, r in mine.groupby("budget").head(1).iterrows()}
        for b in batch_sizes:
            draft = {B: _draft_s(model, by_budget.get(B, by_budget[b_max]), head, b) for B in usable}
            replayed = replay_arm(steps, usable, b, model, draft)
            statics = [r for r in replayed if r["budget"] != AUTO_COLUMN]
            best = max(statics, key=lambda r: r["speedup"])
            auto = next(r for r in replayed if r["budget"] == AUTO_COLUMN)
            for r in replayed:
                rows.append({"suite": suite, "drafter": drafter, "variant": variant, "batch_size": b, **r,
                             "best_static": r is best, "source_budget": b_max, "sequence_steps": len(steps),
                             "auto_vs_best_static": auto["speedup"] / best["speedup"], "hardware": hardware,
                             "head_layers": info.layers if info else 0, "head_taps": info.taps if info else 0,
                             "counters": "recorded",
                             "target": model.target.name})
    if not rows:
        raise JfbenchError(f"run {str(run.path)!r} has no static drafter cells with node rows to replay")
    return pd.DataFrame(rows), notes
