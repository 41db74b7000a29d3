"""Calibration files: measured verify-step times of one target on one device (`bench verify-cost`).

The file (JSON) holds, per batch size b and tree size N, the median seconds of the target forward
(`verify`) and of the engine's per-step work around it (`bookkeeping`: padding, masks, slots and
greedy acceptance), and a `cpu-here`-style profile fitted from the same points so that forwards the
table does not cover (a draft head) are priced on the same device:

    layer_overhead_s = intercept / units,   peak_flops = 1 / slope,   of   t_verify ≈ intercept + slope · FLOPs
    memory_bandwidth = a timed tensor copy (bytes read + written / seconds)

Between measured sizes the table is interpolated linearly in N; outside them, or at an unmeasured
batch size, it is a user error naming the missing point.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.projection.hardware import CPU_HERE, HardwareProfile, profile_from_dict
from jetflow_bench.projection.shapes import ModelShape

FORMAT = "jfbench-verify-cost"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Calibration:
    """A loaded calibration file (see module docstring)."""

    path: str
    target: str  # the target's name as measured
    identity: dict[str, int]  # ModelShape.identity() of the measured target
    device: str
    dtype: str
    context: int  # committed tokens per sequence while measuring
    points: list[dict[str, float]]  # {tokens, batch, verify_s, bookkeeping_s}
    profile: HardwareProfile
    meta: dict[str, Any] = field(default_factory=dict)

    def _table(self, batch: int, column: str) -> tuple[np.ndarray, np.ndarray]:
        rows = sorted((p["tokens"], p[column]) for p in self.points if p["batch"] == batch)
        if not rows:
            measured = sorted({int(p["batch"]) for p in self.points})
            raise JfbenchError(
                f"calibration {self.path!r} has no batch size {batch} (measured: {measured}): re-run "
                f"`jfbench bench verify-cost --batch-sizes ...,{batch}` or project with --batch-sizes {measured[0]}"
            )
        return np.array([r[0] for r in rows], dtype=float), np.array([r[1] for r in rows], dtype=float)

    def _lookup(self, tokens: float, batch: int, column: str) -> float:
        sizes, seconds = self._table(batch, column)
        if not sizes[0] <= tokens <= sizes[-1]:
            raise JfbenchError(
                f"calibration {self.path!r} measured tree sizes {sizes.astype(int).tolist()} at batch {batch}, not "
                f"{tokens:g}: re-run `jfbench bench verify-cost` with --sizes covering 1..{int(np.ceil(tokens))}"
            )
        return float(np.interp(tokens, sizes, seconds))

    def verify_s(self, tokens: float, batch: int) -> float:
        return self._lookup(tokens, batch, "verify_s")

    def bookkeeping_s(self, tokens: float, batch: int) -> float:
        return self._lookup(tokens, batch, "bookkeeping_s")

    def check_target(self, shape: ModelShape) -> None:
        """The file must describe the target being projected."""
        if self.identity != shape.identity():
            raise JfbenchError(
                f"calibration {self.path!r} was measured on target {self.target!r}, not {shape.name!r} "
                f"(shapes differ: {self.identity} vs {shape.identity()}): calibrate this target with "
                "`jfbench bench verify-cost --target ...` or drop --calibration"
            )


def calibrated_name(device: str) -> str:
    """What a projection's tables call a calibrated device: `cpu-here` on a CPU, else the device measured."""
    return CPU_HERE if device.startswith("cpu") else f"calibrated {device}"


def fit_profile(points: list[dict[str, float]], flops: list[float], units: int, bandwidth: float,
                device: str) -> HardwareProfile:
    """Least-squares t_verify = intercept + slope · FLOPs over the measured points (module docstring).

    Trees of more than one node are fitted when there are at least two of them: a lone root at
    batch 1 runs without an attention mask (a faster path no draft head takes).
    """
    masked = [i for i, p in enumerate(points) if p["tokens"] > 1 or p["batch"] > 1]
    chosen = masked if len({flops[i] for i in masked}) >= 2 else list(range(len(points)))
    seconds = np.array([points[i]["verify_s"] for i in chosen])
    work = np.array([flops[i] for i in chosen])
    if len(set(work.tolist())) < 2:
        raise JfbenchError("verify-cost needs at least two distinct tree sizes or batch sizes to fit the device")
    slope, intercept = np.polyfit(work, seconds, 1)
    # Time that does not grow with work (an overhead-bound GPU forward) has no slope to read a rate
    # from: the highest rate the device reached is then the defensible lower bound, not infinity.
    peak = 1.0 / slope if slope > 0 else float(np.max(work / seconds))
    return HardwareProfile(
        name=calibrated_name(device), description=f"{device} (fitted by bench verify-cost)", memory_bandwidth=bandwidth,
        peak_flops=peak, compute_efficiency=1.0, bandwidth_efficiency=1.0,
        layer_overhead_s=max(0.0, float(intercept)) / units,
        bookkeeping_s=float(np.median([p["bookkeeping_s"] for p in points])),
    )


def write_calibration(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": FORMAT, "format_version": FORMAT_VERSION, **data}, indent=2) + "\n")


def load_calibration(path: str | Path) -> Calibration:
    file = Path(path)
    fix = "pass a file written by `jfbench bench verify-cost`"
    try:
        data = json.loads(file.read_text())
    except OSError as err:
        raise JfbenchError(f"calibration file {str(file)!r} cannot be read ({err.strerror}): {fix}") from err
    except json.JSONDecodeError as err:
        raise JfbenchError(f"calibration file {str(file)!r} is not JSON ({err}): {fix}") from err
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise JfbenchError(f"{str(file)!r} is not a calibration file: {fix}")
    try:
        return Calibration(
            path=str(file), target=str(data["target"]), identity={k: int(v) for k, v in data["identity"].items()},
            device=str(data["device"]), dtype=str(data["dtype"]), context=int(data["context"]),
            points=[{k: float(v) for k, v in p.items()} for p in data["points"]],
            profile=profile_from_dict(data["profile"], calibrated_name(str(data["device"])), str(file)), meta=data.get("meta", {}),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise JfbenchError(f"calibration file {str(file)!r} is damaged (field {err}): re-run `jfbench bench verify-cost`") from err
