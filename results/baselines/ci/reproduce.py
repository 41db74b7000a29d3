"""The exact command behind this reference run; CI re-runs it and `jfbench check`s the result.

    python results/baselines/ci/reproduce.py OUT
    jfbench check --baseline results/baselines/ci --run OUT

What it runs: the `micro` toy target (seed 0) and the quick-recipe eagle / dflash / jetflow heads
(seed 0; `jetflow_bench.training.QUICK_RECIPE`, plus each head's own fields in `PINNED`: the recipe
the reference was recorded with), trained here or reused from the cache, then a
sweep of those heads (the jetflow head also as `jetflow-refine`) and `ngram` on GSM8K and HumanEval (first 4 prompts each), budgets 16 and
64, batch 1, 64 new tokens, greedy, fp32 on the CPU with torch's default threads, --strict.
τ and per-depth acceptance are deterministic for this setup, so the check gates on them.

The CPU numerics are pinned (`jetflow_bench.core.runtime.PORTABLE_CPU_NUMERICS`, set before torch
loads and inherited by the sweep): torch's vector kernels capped at AVX2, oneDNN likewise, and MKL in its SSE2 "compatible"
branch. Unpinned, the same seed trains the micro target to other weights on an AVX-512 CPU than on
an AVX2-only one, and the gate then fails on τ with no code changed. Pinned, AMD CPUs agree bit for
bit, but an Intel Xeon still trains other weights: the reference was recorded on an AMD EPYC, and
`jfbench check` gates a run under other CPU numerics (its manifest's `cpu_numerics`) on the wider
`--numerics-tau-tol`. `jfbench check --update-baseline --run OUT` rewrites the reference deliberately.
The cache reuses a target or head by name, whoever trained it (the tests train the same micro target
in-process, unpinned), so a cached one whose record names other CPU numerics is refused.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from jetflow_bench.core.runtime import data_dir, pin_portable_cpu_numerics  # loads no torch

LEARNED = ("eagle", "dflash", "jetflow")
# Recipe fields pinned to what the reference trained, where a default has moved since: the jetflow
# head is the default before issue 52, its layout unset (packed for a causal head); today's default
# (all-mask blocks) trains another head, and the reference's τ would no longer describe it.
PINNED: dict[str, dict] = {"jetflow": {"layout": None}}


def trained_elsewhere(records: dict[Path, dict | None]) -> str | None:
    """An error line if a cached target or head (path -> its training record) was trained under other
    CPU numerics than this gate pins: the cache reuses it by name (e.g. a micro target the tests
    trained in-process), and the gate would then compare other weights. Records without numerics pass."""
    from jetflow_bench.core.runtime import cpu_numerics, numerics_difference

    here = cpu_numerics()
    for path, record in records.items():
        change = numerics_difference((record or {}).get("cpu_numerics"), here)
        if change:
            return (f"error: the cached {path} was trained under other CPU numerics ({change}) than this gate pins, so "
                    "its weights are not the reference's: set JFBENCH_CACHE to an empty folder (or remove it) and rerun")
    return None


def main(out: str) -> int:
    pin_portable_cpu_numerics()  # read when torch loads: the imports below come after it
    from jetflow_bench.heads.checkpoint import read_config
    from jetflow_bench.toy import ensure_toy_target, read_summary
    from jetflow_bench.training import QUICK_RECIPE, ensure_head

    data = data_dir()
    target = ensure_toy_target("micro", data, show_progress=False)
    stale = trained_elsewhere({target: read_summary(target)})  # before heads are trained on it
    if stale:
        sys.exit(stale)
    paths = {name: ensure_head(target, name, data_dir=data, device="cpu", show_progress=False,
                               **QUICK_RECIPE, **PINNED.get(name, {}))
             for name in LEARNED}
    stale = trained_elsewhere({p: read_config(p)[1].training for p in paths.values()})
    if stale:
        sys.exit(stale)
    heads = [f"{name}={path}" for name, path in paths.items()] + [f"jetflow-refine={paths['jetflow']}"]
    command = [
        "jfbench", "sweep", "--target", str(target), "--drafters", ",".join(["ngram", *heads]),
        "--suites", "gsm8k,humaneval", "--budgets", "16,64", "--batch-sizes", "1", "--repeats", "1",
        "--limit", "4", "--max-new-tokens", "64", "--device", "cpu", "--dtype", "float32",
        "--strict", "--no-progress", "--out", out,
    ]
    return subprocess.run(command).returncode


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python results/baselines/ci/reproduce.py OUT")
    sys.exit(main(sys.argv[1]))
