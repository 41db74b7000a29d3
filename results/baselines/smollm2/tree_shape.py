"""How each arm spends its budget: drafted nodes per tree depth, averaged over a run's verify steps.

    python results/baselines/smollm2/tree_shape.py runs/grid64-gsm8k

Reads the run folder's `nodes.parquet` (one row per drafted node: its id, its parent's id, 0 for
the root, and whether it was accepted) and prints, per arm, the mean number of drafted and of
accepted nodes at each depth per step that drafted. A depth-aware tree spends nodes deep; a tree
built from unconditioned marginals spends them wide.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

STEP = ["suite", "drafter", "variant", "budget", "batch_size", "repeat", "temperature", "request", "step"]


def node_depths(nodes: pd.DataFrame) -> pd.Series:
    """Depth of every node (1 = a first token), found by walking parent links one level at a time."""
    keyed = nodes.set_index([*STEP, "node"])["parent"]
    depth = pd.Series(1, index=keyed.index).where(keyed.eq(0))
    while depth.isna().any():
        parents = pd.MultiIndex.from_frame(keyed.index.to_frame(index=False).assign(node=keyed.to_numpy()))
        from_parent = pd.Series(depth.reindex(parents).to_numpy() + 1, index=keyed.index)
        known = depth.notna().sum()
        depth = depth.fillna(from_parent)
        if depth.notna().sum() == known:
            raise SystemExit("nodes.parquet has nodes whose parent is not in their step: a damaged run folder")
    return depth.astype(int)


def tree_shape(nodes: pd.DataFrame) -> pd.DataFrame:
    """Rows: arm and budget; columns: mean drafted (and accepted) nodes per step at each depth."""
    frame = nodes.assign(depth=node_depths(nodes).to_numpy())
    arm = ["drafter", "variant", "budget", "batch_size"]
    steps = frame.drop_duplicates(STEP).groupby(arm).size().rename("steps")
    counts = frame.groupby([*arm, "depth"]).agg(drafted=("node", "size"), accepted=("accepted", "sum"))
    per_step = counts.join(steps, on=arm)
    per_step[["drafted", "accepted"]] = per_step[["drafted", "accepted"]].div(per_step["steps"], axis=0)
    return per_step[["drafted", "accepted"]].unstack("depth").round(2)


def arm_name(drafter: str, variant: str, budget: int, batch_size: int) -> str:
    options = "" if variant == "default" else f"[{variant}]"
    return f"{drafter}{options} B={budget} batch={batch_size}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a jfbench run folder with nodes.parquet")
    args = parser.parse_args()
    path = args.run / "nodes.parquet"
    if not path.is_file():
        raise SystemExit(f"{path} not found: run a sweep with a learned drafter into {args.run} first")
    shape = tree_shape(pd.read_parquet(path))
    for what in ("drafted", "accepted"):
        table = shape[what].fillna(0)
        table = table.loc[:, table.ge(0.005).any()]  # drop depths that no arm reaches once in 200 steps
        table.columns = [f"depth {d}" for d in table.columns]
        table.index = [arm_name(*key) for key in table.index]
        print(f"\n{what} nodes per step, by depth\n")
        print(table.to_string(float_format="{:.2f}".format))


if __name__ == "__main__":
    main()
