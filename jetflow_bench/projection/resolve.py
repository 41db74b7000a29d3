"""Turn the `project` command's choices (hardware, target, dtype, calibration, context) into a CostModel."""

from __future__ import annotations

from pathlib import Path

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.projection.cost import CostModel
from jetflow_bench.projection.hardware import CPU_HERE, resolve_hardware
from jetflow_bench.projection.shapes import DTYPE_BYTES, presets, target_shape
from jetflow_bench.projection.verify_cost import load_calibration

DEFAULT_HARDWARE = "h100-sxm"
DEFAULT_DTYPE = "bfloat16"  # the paper's precision and that of every GPU preset's sources


def build_cost_model(
    hardware: str | None, target: str, dtype: str | None, calibration: Path | None, context: int | None
) -> tuple[CostModel, str]:
    """(cost model, hardware name). A calibration fixes the device, dtype and (by default) context."""
    if not target:
        raise JfbenchError("the run does not name its target: pass --target-config (a preset, folder or hub id)")
    shape = target_shape(target)
    if calibration is not None:
        if hardware not in (None, CPU_HERE):
            raise JfbenchError(
                f"--calibration describes the device it was measured on, not {hardware!r}: drop --hardware "
                "(or pass --hardware cpu-here)"
            )
        cal = load_calibration(calibration)
        cal.check_target(shape)
        measured_dtype = cal.dtype.removeprefix("torch.")
        if dtype not in (None, measured_dtype):
            raise JfbenchError(f"calibration {str(calibration)!r} was measured in {measured_dtype}, not {dtype}: drop --dtype")
        return CostModel(shape, cal.profile, DTYPE_BYTES[measured_dtype], context or cal.context, cal), cal.profile.name
    name = hardware or DEFAULT_HARDWARE
    profile = resolve_hardware(name)
    if profile is None:
        raise JfbenchError(
            "--hardware cpu-here is calibrated, not preset: run `jfbench bench verify-cost --target T --out cal.json` "
            "and pass --calibration cal.json"
        )
    chosen = dtype or DEFAULT_DTYPE
    if chosen not in DTYPE_BYTES:
        raise JfbenchError(f"--dtype {chosen!r} is not supported: use one of {', '.join(DTYPE_BYTES)}")
    default_context = int(presets()["assumptions"]["context_tokens"])
    return CostModel(shape, profile, DTYPE_BYTES[chosen], context or default_context), profile.name
