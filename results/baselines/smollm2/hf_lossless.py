"""Losslessness against `transformers` itself: a sweep's plain-decoding outputs beside `generate`'s.

    python hf_lossless.py RUN --target smollm2-135m-instruct

A sweep checks every speculative arm against its own AR baseline, token for token. This closes the
chain on the other side: for every prompt of the run, the AR arm's output (batch 1) must equal the
first tokens of `model.generate` (greedy, one prompt at a time, no padding). Prints one markdown row
per suite: prompts, AR = transformers, and per speculative arm the unexcused divergences from AR.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from jetflow_bench.bench.baseline import hf_greedy
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.sweep.prompts import encode
from jetflow_bench.targets import resolve_target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    parser.add_argument("--target", required=True)
    args = parser.parse_args()
    requests = pd.read_parquet(args.run / "requests.parquet")
    requests = requests[(requests["batch_size"] == 1) & (requests["repeat"] == 0)]
    runner = TargetRunner.load(resolve_target(args.target), "cpu", "float32")
    arms = sorted(set(requests["drafter"]) - {"ar"})
    print(f"| suite | prompts | AR = transformers generate | {' | '.join(arms)} |")
    print("| --- | --- | --- |" + " --- |" * len(arms))
    for suite, rows in requests.groupby("suite"):
        plain = rows[rows["drafter"] == "ar"]
        same = 0
        for row in plain.itertuples():
            ours = list(row.output_ids)
            theirs = hf_greedy(runner, [encode(runner, row.prompt)], len(ours))[0]
            same += ours == theirs
        cells = []
        for arm in arms:
            cell = rows[rows["drafter"] == arm]
            cells.append(f"{int((~cell['lossless'] & ~cell['excused']).sum())} of {len(cell)} diverge, "
                         f"{int(cell['accepted'].sum())} drafts accepted")
        print(f"| {suite} | {len(plain)} | {same} / {len(plain)} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
