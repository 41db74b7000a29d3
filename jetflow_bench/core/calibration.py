"""Calibrated acceptance: does a drafter's node score predict whether the target accepts the node?

A drafter that scores nodes by cumulative draft log-prob claims, for every drafted node u,

    predicted(u) = exp(score(u)) = q(path to u)

and the target's verdict is `accepted(u)` = u lies on the accepted path (its whole root path was
accepted; raw verification, before the stop rule trims the last step). Nodes are grouped into
score bins (`SCORE_EDGES`, equal steps in log-prob: the mass of a tree's nodes sits at small
probabilities, where equal-width probability bins would put almost every node in one bin). Per bin:

    predicted_b = mean predicted(u),   observed_b = mean accepted(u),   nodes_b = count
    ECE = Σ_b (nodes_b / N) · |predicted_b − observed_b|        (expected calibration error)

A perfectly calibrated drafter has observed_b = predicted_b in every bin, hence ECE = 0 (up to
sampling noise). Pure numpy: no torch, so reports can use it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

# Bin edges in log-prob (score) space, from the most confident bin down; the last bin is open below.
SCORE_EDGES: tuple[float, ...] = (0.0, -0.25, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0, -9.0, -np.inf)
RELIABILITY_COLUMNS = ["bin", "score_hi", "score_lo", "nodes", "accepted", "predicted", "observed"]


def score_bin(scores: np.ndarray | Sequence[float]) -> np.ndarray:
    """Bin index (0 = most confident) of each score: bin b = [SCORE_EDGES[b + 1], SCORE_EDGES[b]], a
    score on an edge goes to the bin above it; scores above 0 count as 0 (log-probs are <= 0)."""
    scores = np.minimum(np.asarray(scores, dtype=float), 0.0)
    edges = np.asarray(SCORE_EDGES[1:-1])  # inner edges, descending
    return np.searchsorted(-edges, -scores, side="left")  # score > edge_1 -> 0, ...


def reliability_table(scores: np.ndarray | Sequence[float], accepted: np.ndarray | Sequence[bool]) -> pd.DataFrame:
    """Per score bin: nodes, accepted nodes, mean predicted probability, observed acceptance.

    Bins without nodes are left out.
    """
    scores = np.asarray(scores, dtype=float)
    accepted = np.asarray(accepted, dtype=bool)
    bins = score_bin(scores)
    frame = pd.DataFrame({"bin": bins, "predicted": np.exp(np.minimum(scores, 0.0)), "accepted": accepted})
    grouped = frame.groupby("bin").agg(
        nodes=("accepted", "size"), accepted=("accepted", "sum"), predicted=("predicted", "mean")
    ).reset_index()
    grouped["observed"] = grouped["accepted"] / grouped["nodes"]
    grouped["score_hi"] = [SCORE_EDGES[b] for b in grouped["bin"]]
    grouped["score_lo"] = [SCORE_EDGES[b + 1] for b in grouped["bin"]]
    return grouped[RELIABILITY_COLUMNS]


def expected_calibration_error(table: pd.DataFrame) -> float:
    """ECE of a `reliability_table` (module docstring); NaN when it holds no nodes."""
    total = table["nodes"].sum()
    if not total:
        return float("nan")
    return float((table["nodes"] / total * (table["predicted"] - table["observed"]).abs()).sum())


def calibration_by(nodes: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """ECE and node counts per group of a nodes table (columns `score`, `accepted`, ``keys``)."""
    rows = []
    for key, group in nodes.groupby(keys, dropna=False):
        table = reliability_table(group["score"].to_numpy(), group["accepted"].to_numpy())
        values = key if isinstance(key, tuple) else (key,)
        rows.append({**dict(zip(keys, values, strict=True)), "ece": expected_calibration_error(table),
                     "calibration_nodes": int(table["nodes"].sum())})
    return pd.DataFrame(rows, columns=[*keys, "ece", "calibration_nodes"])
