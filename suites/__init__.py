"""Benchmark suites, registered by name so that ``--suites gsm8k,math500`` works everywhere.

Built-ins are registered lazily (``"module:Class"``); third-party suites join through the
``jfbench.suites`` entry-point group with a `suites.base.Suite` subclass. Nothing here imports a
suite's module until it is chosen.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.registry import Registry
from suites.base import LoadedSuite, Record, Request, Suite

SUITES: Registry[type[Suite]] = Registry("suite", entry_point_group="jfbench.suites")
SUITES.register("gsm8k", "suites.math_suites:GSM8K")
SUITES.register("math500", "suites.math_suites:MATH500", aliases=("math-500",))
SUITES.register("aime25", "suites.math_suites:AIME25", aliases=("aime2025",))
SUITES.register("aime24", "suites.math_suites:AIME24", aliases=("aime2024",))
SUITES.register("humaneval", "suites.code_suites:HumanEval", aliases=("human-eval", "human_eval"))
SUITES.register("mbpp", "suites.code_suites:MBPP")
SUITES.register("mbpp-sanitized", "suites.code_suites:MBPPSanitized", aliases=("mbpp_sanitized",))
SUITES.register("livecodebench", "suites.code_suites:LiveCodeBench", aliases=("lcb",))
SUITES.register("mt_bench", "suites.chat_suites:MTBench", aliases=("mt-bench", "mtbench"))


def get_suite(name: str, **options: Any) -> Suite:
    """The suite registered as ``name`` (or an alias), built with its ``options`` (e.g. ``turns=2``)."""
    return SUITES.get(name)(**options)


def parse_suites(spec: str | Sequence[str]) -> list[Suite]:
    """``"gsm8k,math500"`` (or a list of names) -> suites, in order, duplicates and aliases folded."""
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    canonical = list(dict.fromkeys(SUITES.canonical(n) for n in names if n.strip()))
    if not canonical:
        raise JfbenchError(f"--suites {spec!r} names no suite: choose from {', '.join(SUITES.names())}")
    return [get_suite(name) for name in canonical]


__all__ = ["SUITES", "LoadedSuite", "Record", "Request", "Suite", "get_suite", "parse_suites"]
