"""Where a drafter spends its budget: drafted and accepted nodes per tree depth, per verify step.

τ and the per-depth acceptance say how far drafts got; this says how the tree was shaped to get
there. A tree built from marginals that do not see their branch (a block head under the `accum`
rule) fills each depth before the next, while a drafter whose children are conditioned on their
branch (EAGLE, JetFlow's refine pass) goes deep along its best paths. The rows come from
`nodes.parquet`, which keeps the first NODE_CAP nodes of each tree in build order, so above that
budget the counts cover those nodes only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.report.loading import CELL_KEYS, REBUILD, with_cell_keys

NODE_CAP = 256  # nodes.parquet keeps at most this many nodes of a tree, root included (sweep.tables)
CELL = [*CELL_KEYS]  # pandas reads a tuple of keys as one key
STEP = [*CELL, "request", "step"]


def node_depths(nodes: pd.DataFrame) -> np.ndarray:
    """Each row's depth (1 = a first token; parent 0 is the root), by pointer jumping over parent
    links: log2(depth) vectorised passes, so a 255-node chain costs 8 of them."""
    step = with_cell_keys(nodes).groupby(STEP, sort=False, dropna=False).ngroup().to_numpy()
    rows = pd.MultiIndex.from_arrays([step, nodes["node"].to_numpy()])
    if not rows.is_unique:
        raise _damaged(f"{int(rows.duplicated().sum())} node row(s) repeat a node of their step")
    up = rows.get_indexer(pd.MultiIndex.from_arrays([step, nodes["parent"].to_numpy()]))  # -1: none
    orphans = (up < 0) & nodes["parent"].ne(0).to_numpy()
    if orphans.any():
        raise _damaged(f"{int(orphans.sum())} node row(s) name a parent that is not in their step")
    depth = np.ones(len(up), dtype=np.int64)
    for _ in range(max(len(up), 1).bit_length() + 1):  # enough passes for a chain of every row
        linked = up >= 0
        if not linked.any():
            return depth
        depth[linked] += depth[up[linked]]
        up = np.where(linked, up[np.maximum(up, 0)], -1)
    raise _damaged("parent links form a cycle")


def _damaged(problem: str) -> JfbenchError:
    return JfbenchError(f"nodes.parquet is damaged ({problem}): {REBUILD}")


def tree_shape(nodes: pd.DataFrame) -> pd.DataFrame:
    """One row per cell and depth: mean drafted and accepted nodes per verify step that drafted."""
    if nodes.empty:
        return pd.DataFrame(columns=[*CELL, "depth", "drafted", "accepted", "steps"])
    nodes = with_cell_keys(nodes)
    frame = nodes.assign(depth=node_depths(nodes))
    steps = frame.drop_duplicates(STEP).groupby(CELL, dropna=False).size().rename("steps")
    counts = frame.groupby([*CELL, "depth"], dropna=False).agg(drafted=("node", "size"), accepted=("accepted", "sum"))
    shape = counts.join(steps, on=CELL).reset_index()
    shape[["drafted", "accepted"]] = shape[["drafted", "accepted"]].div(shape["steps"], axis=0)
    return shape


ARM = ["suite", "drafter", "variant", "budget", "batch_size", "temperature"]
DEEPEST_COLUMN = 12  # deeper nodes share one column, so a 255-token prompt-lookup chain fits a table


def by_depth(shape: pd.DataFrame, what: str) -> pd.DataFrame:
    """One row per arm (repeats pooled: their mean), ``steps`` then the mean ``what`` ("drafted" or
    "accepted") nodes per step at depths 1..12 as columns d1..d12, and d>12 for any deeper ones.
    Depths that no arm reaches once in 200 steps are left out."""
    repeats = shape.groupby(ARM)["repeat"].nunique()
    steps = shape.drop_duplicates([*ARM, "repeat"]).groupby(ARM)["steps"].sum()
    table = shape.pivot_table(index=ARM, columns="depth", values=what, aggfunc="sum", fill_value=0.0)
    table = table.div(repeats, axis=0)
    reached = table.columns[table.ge(0.005).any()]
    deepest = int(reached.max()) if len(reached) else 1
    wide = pd.DataFrame({"steps": steps})
    for depth in range(1, min(deepest, DEEPEST_COLUMN) + 1):
        wide[f"d{depth}"] = table.get(depth, 0.0)
    if deepest > DEEPEST_COLUMN:
        wide[f"d>{DEEPEST_COLUMN}"] = table.loc[:, table.columns > DEEPEST_COLUMN].sum(axis=1)
    return wide.reset_index()
