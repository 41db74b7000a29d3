"""Headroom: how much τ could another budget have given a block drafter? Its trees, replayed offline.

A block head's pass 1 (DFlash-T, JetFlow as released) gives per-depth distributions q_1..q_D that do
not depend on the branch, so a step's tree at any budget is a function of their top-K and the tree
options alone. The sweep records both (`marginals.parquet`, one row per verify step, for drafters
with a `Drafter.replay_tree`). The emitted output is the target's own continuation, so the step's
acceptance at any budget follows without the target: the deepest node whose root path spells the
next emitted tokens, plus the bonus, cut at the request's end exactly as τ counts a step
(docs/methodology.md): a step emits min(accepted + 1, tokens left in the output).

The tree is built by the drafter's own construction (`drafters.tree_builder.build_tree`, the
reference the device builder is tested against), once per step at the largest budget asked: every
construction adds nodes in one order, so the tree at a smaller budget is a prefix of it (the
engine's per-step budget policy relies on the same property; tested here for each construction).
Replayed at the budget a cell ran, at the positions it visited, the replay must give the measured
τ: a difference is a bug in one of the two. At another budget it replays the nearest measured
cell's positions, an estimate: a larger tree would have accepted more, and the request would have
moved on to other positions. τ_∞ is the bound of an unlimited top-K tree of the same depth: a step
accepts as long as each next token is among its depth's top K.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence

import numpy as np
import pandas as pd

from drafters.tree_builder import ChildDist, TreeOptions, build_tree, marginal_lookup
from jetflow_bench.core.arms import arm_label
from jetflow_bench.core.budget_policy import AUTO_COLUMN
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.tree import emitted, matched_nodes
from jetflow_bench.report.loading import CELL_KEYS

BUDGETS = (16, 32, 64, 128, 256, 512, 1024)  # the budgets every headroom table replays
ARM = ["suite", "drafter", "variant", "batch_size", "temperature"]  # repeats are pooled
STEP = [*CELL_KEYS, "request", "step"]
INF = "inf"  # the budget column of the τ_∞ row
COLUMNS = ["suite", "arm", "batch_size", "temperature", "budget", "source", "tau", "tau_replayed", "steps"]
CHECK_COLUMNS = ["suite", "arm", "batch_size", "temperature", "budget", "source", "tau", "tau_replayed", "error"]


def step_dists(k: int, tokens: Sequence[int], logps: Sequence[float], entropy: Sequence[float]) -> list[ChildDist]:
    """One step's recorded row (flat D x K arrays) -> its per-depth `ChildDist`s, as the drafter had them."""
    tokens, logps = np.asarray(tokens).reshape(-1, k).tolist(), np.asarray(logps).reshape(-1, k).tolist()
    return [ChildDist(tuple(t), tuple(lp), h) for t, lp, h in zip(tokens, logps, np.asarray(entropy).tolist(), strict=True)]


def top_k_depth(dists: Sequence[ChildDist], continuation: Sequence[int], max_depth: int) -> int:
    """Accepted length under an unlimited top-K tree: how many next tokens are each in their depth's top K."""
    n = 0
    for dist, token in zip(dists[:max_depth], continuation, strict=False):
        if token not in dist.tokens:
            break
        n += 1
    return n


def replay_cell(marginals: pd.DataFrame, steps: pd.DataFrame, outputs: dict[int, list[int]], budgets: Sequence[int]
                ) -> tuple[dict[int, int], int, int]:
    """One cell replayed: (Σ emitted per budget, Σ emitted under the top-K bound, steps replayed).

    ``marginals`` and ``steps`` are the cell's rows, ``outputs`` its requests' generated ids.
    """
    options = TreeOptions(**json.loads(marginals["tree"].iloc[0]))
    positions = _positions(steps)
    total, bound, n = dict.fromkeys(budgets, 0), 0, 0
    largest = max(budgets)
    for row in marginals.itertuples(index=False):
        output = outputs[row.request]
        start = positions[row.request, row.step]
        continuation = output[start:]
        dists = step_dists(row.k, row.tokens, row.logps, row.entropy)
        path = matched_nodes(build_tree(0, marginal_lookup(dists), largest, options), continuation)
        for budget in budgets:
            total[budget] += emitted(sum(node < budget for node in path), len(continuation))
        bound += emitted(top_k_depth(dists, continuation, options.max_depth), len(continuation))
        n += 1
    if n != len(steps):
        raise JfbenchError(f"marginals.parquet holds {n} of the cell's {len(steps)} verify steps: it is damaged; "
                           "re-run the sweep with --force to record them again")
    return total, bound, n


def _positions(steps: pd.DataFrame) -> dict[tuple[int, int], int]:
    """(request, step) -> index in the request's generated ids of the first token that step emitted
    (the prefill emitted token 0)."""
    ordered = steps.sort_values(["request", "step"])
    before = ordered.groupby("request")["emitted"].cumsum() - ordered["emitted"]
    return dict(zip(zip(ordered["request"], ordered["step"], strict=True), (1 + before).tolist(), strict=True))


def nearest(budget: int, measured: Sequence[int]) -> int:
    """The measured budget whose cell replays ``budget``: the nearest on a log scale (ties: the larger)."""
    return min(measured, key=lambda m: (abs(math.log2(budget / m)), -m))


def _arms(marginals: pd.DataFrame, steps: pd.DataFrame) -> Iterator[tuple[dict, pd.DataFrame, pd.DataFrame, list[int]]]:
    """Per replayable arm: (its table label, its marginals, its steps, its measured budgets)."""
    marginals = marginals[marginals["budget"] != AUTO_COLUMN]  # a per-step budget has no single tree to replay
    for arm, arm_marginals in marginals.groupby(ARM, sort=True):
        keys = dict(zip(ARM, arm, strict=True))
        label = {"suite": keys["suite"], "arm": arm_label(keys["drafter"], keys["variant"]),
                 "batch_size": keys["batch_size"], "temperature": keys["temperature"]}
        measured = sorted(int(b) for b in arm_marginals["budget"].unique())
        yield label, arm_marginals, steps.merge(pd.DataFrame([keys]), on=ARM), measured


def headroom_table(marginals: pd.DataFrame, steps: pd.DataFrame, requests: pd.DataFrame,
                   budgets: Sequence[int] = BUDGETS) -> pd.DataFrame:
    """One row per replayable arm and budget (`COLUMNS`), plus its τ_∞ row; repeats pooled.

    ``tau`` is the measured τ at a budget the arm ran (blank otherwise), ``source`` the measured
    budget whose cells were replayed, ``tau_replayed`` the replay's τ (Σ emitted / steps).
    """
    rows = []
    for label, arm_marginals, arm_steps, measured in _arms(marginals, steps):
        wanted = sorted({*budgets, *measured})
        replays = {m: _replay_budget(arm_marginals, arm_steps, requests, m, [b for b in wanted if nearest(b, measured) == m])
                   for m in measured}
        for budget in wanted:
            source = nearest(budget, measured)
            total, _, n, tau = replays[source]
            rows.append({**label, "budget": budget, "source": source, "tau": tau if budget == source else np.nan,
                         "tau_replayed": total[budget] / n, "steps": n})
        _, bound, n, _ = replays[measured[-1]]
        rows.append({**label, "budget": INF, "source": measured[-1], "tau": np.nan, "tau_replayed": bound / n, "steps": n})
    return pd.DataFrame(rows, columns=COLUMNS)


def replay_check(marginals: pd.DataFrame, steps: pd.DataFrame, requests: pd.DataFrame) -> pd.DataFrame:
    """How far an estimate at an unmeasured budget can be off: each measured budget of an arm replayed
    from the cells of the nearest *other* measured budget, beside its measured τ (``error`` =
    replayed / measured − 1; `CHECK_COLUMNS`). Arms measured at one budget have no row."""
    rows = []
    for label, arm_marginals, arm_steps, measured in _arms(marginals, steps):
        for budget in measured:
            others = [m for m in measured if m != budget]
            if not others:
                continue
            source = nearest(budget, others)
            total, _, n, _ = _replay_budget(arm_marginals, arm_steps, requests, source, [budget])
            tau = _measured_tau(arm_steps, budget)
            rows.append({**label, "budget": budget, "source": source, "tau": tau, "tau_replayed": total[budget] / n,
                         "error": total[budget] / n / tau - 1})
    return pd.DataFrame(rows, columns=CHECK_COLUMNS)


def _replay_budget(marginals: pd.DataFrame, steps: pd.DataFrame, requests: pd.DataFrame, budget: int,
                   budgets: list[int]) -> tuple[dict[int, int], int, int, float]:
    """Every repeat's cell at the measured ``budget`` replayed at ``budgets`` (and itself), pooled:
    (Σ emitted per budget, Σ emitted under the bound, steps, measured τ)."""
    budgets = sorted({*budgets, budget})
    total, bound, n = dict.fromkeys(budgets, 0), 0, 0
    cell_steps = steps[steps["budget"] == budget]
    for cell, rows in marginals[marginals["budget"] == budget].groupby(list(CELL_KEYS), sort=True):
        keys = pd.DataFrame([dict(zip(CELL_KEYS, cell, strict=True))])
        these = cell_steps.merge(keys, on=list(CELL_KEYS))
        outputs = {int(r.request): list(r.output_ids) for r in requests.merge(keys, on=list(CELL_KEYS)).itertuples()}
        cell_total, cell_bound, cell_n = replay_cell(rows, these, outputs, budgets)
        total = {b: total[b] + cell_total[b] for b in budgets}
        bound, n = bound + cell_bound, n + cell_n
    return total, bound, n, _measured_tau(steps, budget)


def _measured_tau(steps: pd.DataFrame, budget: int) -> float:
    """τ of an arm's cells at ``budget``, repeats pooled (Σ emitted / verify steps)."""
    cell_steps = steps[steps["budget"] == budget]
    return float(cell_steps["emitted"].sum() / len(cell_steps)) if len(cell_steps) else np.nan
