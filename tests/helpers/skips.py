"""Skip reasons sorted by what it would take to run the test (conftest's summary line reads them)."""

from __future__ import annotations


def skip_kind(reason: str) -> str:
    """The kind of a skip reason: what it would take to run the test."""
    lowered = reason.lower()
    if "vllm" in lowered:
        return "need vLLM's environment"
    if "jfbench_data_dir" in lowered or "data folder" in lowered:
        return "need the real data folder"
    return "other (a tool or device absent here)"
