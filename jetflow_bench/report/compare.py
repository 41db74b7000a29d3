"""One arm's τ in two sets of runs: two heads of a drafter measured apart, paired over seeds x prompts.

τ is deterministic for a head, a target and its prompts (greedy decoding; the same cells give the
same per-request counts in any session), so τ-only runs of two heads can be paired afterwards,
prompt by prompt. A speed-up cannot: it needs its baseline timed beside it (`jfbench ablate`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.report.claims import load_requests, matched_effect

COLUMNS = ["suite", "budget", "arm", "tau_base", "tau_other", "effect", "lo", "hi", "seeds", "prompts"]


def _prompts(path: Path) -> dict[str, tuple]:
    """suite -> what pairs requests: the target, the prompts drawn and the tokens decoded per prompt."""
    manifest = json.loads((path / "manifest.json").read_text())
    config = manifest["config"]
    return {suite: (config.get("target"), info.get("prompts_hash"), config.get("max_new_tokens"),
                    config.get("temperatures"))
            for suite, info in manifest.get("suites", {}).items()}


def check_same_prompts(paths: Sequence[Path]) -> None:
    """Raise unless every run that holds a suite decoded the same prompts of it the same way."""
    seen: dict[str, tuple[tuple, Path]] = {}
    for path in paths:
        if not (path / "manifest.json").is_file():
            raise JfbenchError(f"{path} has no manifest.json: pass run folders written by `jfbench sweep` or `ablate`")
        for suite, key in _prompts(path).items():
            first = seen.setdefault(suite, (key, path))
            if first[0] != key:
                raise JfbenchError(f"{path} and {first[1]} ran different {suite} requests (target, prompts, new tokens or "
                                   "temperature differ): pair runs of one grid (same --target, --limit, --max-new-tokens)")


def compare_tau(base: Sequence[Path], other: Sequence[Path], arm: str) -> pd.DataFrame:
    """Per suite and budget, τ of ``arm`` (its default variant) in ``other`` over its τ in ``base``, minus 1,
    with a 95% bootstrap CI over the head seeds (a run's ``-sK``) x prompts both sides hold."""
    check_same_prompts([*base, *other])
    sides = []
    for label, paths in (("base", base), ("other", other)):
        rows = load_requests(paths)
        rows = rows[(rows["drafter"] == arm) & (rows["arm_variant"] == "default")]
        if rows.empty:
            raise JfbenchError(f"{', '.join(map(str, paths))}: no {arm} arm (default variant) to compare")
        sides.append(rows.assign(drafter=label))
    rows = pd.concat(sides, ignore_index=True)
    out = []
    for (suite, budget), _ in rows.groupby(["suite", "budget"]):
        cells = {"b": ("base", "default", budget), "o": ("other", "default", budget)}
        found = matched_effect(rows[rows["suite"] == suite], cells, lambda t: t["o"] / t["b"] - 1)
        if found is None:
            continue
        effect = found.effect
        out.append({"suite": suite, "budget": budget, "arm": arm, "tau_base": found.taus["b"], "tau_other": found.taus["o"],
                    "effect": effect.estimate, "lo": effect.lo, "hi": effect.hi, "seeds": found.seeds,
                    "prompts": found.prompts})
    if not out:
        raise JfbenchError(f"no suite, budget and head seed is in both sides for {arm}: the runs share no cell to pair")
    return pd.DataFrame(out, columns=COLUMNS)
