"""Hardware profiles: the per-device terms of the cost model, by preset name or from a TOML file.

A profile is six numbers (presets.toml gives each its source; docs/projection.md tabulates them):
achievable memory bandwidth = memory_bandwidth · bandwidth_efficiency, achievable compute =
peak_flops · compute_efficiency, a fixed cost per layer unit of every forward (kernel launches,
small kernels, sampling) and a fixed engine bookkeeping cost per speculative step. `cpu-here` has
no preset: `jfbench bench verify-cost` measures it and writes it into a calibration file.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.projection.shapes import presets

CPU_HERE = "cpu-here"


@dataclass(frozen=True)
class HardwareProfile:
    """One device's cost-model terms (SI units)."""

    name: str
    description: str
    memory_bandwidth: float  # bytes/s, spec sheet
    peak_flops: float  # FLOP/s at the projection dtype, dense, spec sheet
    compute_efficiency: float  # achievable share of peak_flops for the GEMMs of a forward
    bandwidth_efficiency: float  # achievable share of memory_bandwidth for streaming weights
    layer_overhead_s: float  # fixed seconds per layer unit per forward (launches, small kernels, sampling)
    bookkeeping_s: float  # fixed seconds per speculative step (tree masks, acceptance, KV compaction)

    def __post_init__(self) -> None:
        for name in ("memory_bandwidth", "peak_flops", "compute_efficiency", "bandwidth_efficiency"):
            if not getattr(self, name) > 0:
                raise JfbenchError(f"hardware profile {self.name!r}: {name} must be > 0 (got {getattr(self, name)})")
        for name in ("layer_overhead_s", "bookkeeping_s"):
            if getattr(self, name) < 0:
                raise JfbenchError(f"hardware profile {self.name!r}: {name} must be >= 0 (got {getattr(self, name)})")

    @property
    def bandwidth(self) -> float:
        """Achievable bytes/s."""
        return self.memory_bandwidth * self.bandwidth_efficiency

    @property
    def compute(self) -> float:
        """Achievable FLOP/s."""
        return self.peak_flops * self.compute_efficiency

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


NUMERIC = tuple(f.name for f in fields(HardwareProfile) if f.name not in ("name", "description"))


def profile_from_dict(data: dict[str, Any], name: str, origin: str) -> HardwareProfile:
    missing = [key for key in NUMERIC if key not in data]
    if missing:
        raise JfbenchError(f"hardware profile {name!r} ({origin}) lacks {missing}: give every field of docs/projection.md")
    try:
        values = {key: float(data[key]) for key in NUMERIC}
    except (TypeError, ValueError) as err:
        raise JfbenchError(f"hardware profile {name!r} ({origin}): every field must be a number ({err})") from err
    return HardwareProfile(name=name, description=str(data.get("description", name)), **values)


def preset_names() -> list[str]:
    return [*presets()["hardware"], CPU_HERE]


def resolve_hardware(spec: str) -> HardwareProfile | None:
    """A preset name or a TOML file; None for `cpu-here` (its profile comes from a calibration file)."""
    if spec == CPU_HERE:
        return None
    known = presets()["hardware"]
    if spec in known:
        return profile_from_dict(known[spec], spec, "presets.toml")
    path = Path(spec).expanduser()
    if path.suffix == ".toml":
        if not path.is_file():
            raise JfbenchError(f"hardware file {spec!r} does not exist: pass a TOML file or a preset")
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as err:
            raise JfbenchError(f"hardware file {spec!r} is not valid TOML ({err})") from err
        return profile_from_dict(data, str(data.get("name", path.stem)), spec)
    raise JfbenchError(
        f"unknown hardware {spec!r}: use a preset ({', '.join(preset_names())}) or a TOML file with the fields "
        "listed in docs/projection.md"
    )
