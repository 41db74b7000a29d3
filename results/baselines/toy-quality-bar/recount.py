"""τ of the recorded quality-bar cells, recounted under the stop-rule-aware definition.

These runs were recorded before the engine counted accepted tokens after the stop rule, so their
`tau` column (1 + Σ accepted / steps) credits drafted tokens past each request's stop point. The
tokens actually emitted by verify steps are still in the recorded counts: every request's first
token comes from prefill and the rest from verify steps, so

    τ = Σ emitted / steps = (new_tokens − n_requests) / n_steps

(exact when every request took at least one verify step, as all of these 256-token requests did).

    python results/baselines/toy-quality-bar/recount.py
"""

from __future__ import annotations

import csv
from pathlib import Path

from jetflow_bench.core.arms import arm_label
from jetflow_bench.measure import metrics

HERE = Path(__file__).parent


def recounted(path: Path) -> list[dict[str, str]]:
    rows = []
    for row in csv.DictReader(path.open()):
        if row["drafter"] == "ar":
            continue
        tau = float(metrics.tau(float(row["new_tokens"]) - int(row["n_requests"]), float(row["n_steps"])))
        arm = arm_label(row["drafter"], row["variant"])
        rows.append({"arm": arm, "budget": row["budget"], "recorded": f"{float(row['tau']):.2f}", "recounted": f"{tau:.2f}"})
    return rows


def main() -> None:
    print("| run | arm | B | τ as recorded | τ recounted |")
    print("| --- | --- | --- | --- | --- |")
    for run in ("main", "ablate"):
        for row in recounted(HERE / run / "summary.csv"):
            print(f"| {run} | {row['arm']} | {row['budget']} | {row['recorded']} | {row['recounted']} |")


if __name__ == "__main__":
    main()
