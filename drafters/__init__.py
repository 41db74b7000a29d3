"""Drafter plug-ins: one folder per family (its modules and its `jetflow_bench.plugins.Family`
record), registered below with one line each. Third parties name their record in the
``jfbench.families`` entry-point group (or call `register_family`), or a bare drafter class in the
``jfbench.drafters`` group (value ``"module:Class"``). Shared by the learned families: `learned`
(loading a head, its context cache), the tree builders (`tree_*`), `head_cache`, `timing` and
their drafting axes (`axes`).
"""

from pathlib import Path
from typing import Any

from drafters import block, eagle, ngram, oracle
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.registry import load_attr
from jetflow_bench.plugins import DRAFTERS, export_formats, load_family_entry_points, register_family

# Registration order is the legend's order: oldest family first.
register_family(ngram.FAMILY)
register_family(oracle.FAMILY)
register_family(eagle.FAMILY)
register_family(block.DFLASH)
register_family(block.JETFLOW)
load_family_entry_points()  # third parties' families (group jfbench.families)


def export_head(source: Path, fmt: str, out: Path) -> Path:
    """Write the head at ``source`` in the serving layout ``fmt`` (a family's `Family.exports`) into ``out``."""
    formats = export_formats()
    if fmt not in formats:
        raise JfbenchError(f"unknown export format {fmt!r}: choose one of {', '.join(sorted(formats))}")
    if not (Path(source) / "config.json").is_file():
        raise JfbenchError(f"{source} is not a head folder (no config.json): pass a folder made by `jfbench train` or a released head")
    return load_attr(formats[fmt])(Path(source), Path(out))


def runnable_drafter(name: str) -> str:
    """The canonical name of a drafter a sweep can build from the command line.

    Test doubles that need inputs only Python can give (``Drafter.cli_refusal``) are refused here,
    before any model loads.
    """
    canonical = DRAFTERS.canonical(name)
    refusal = DRAFTERS.get(canonical).cli_refusal
    if refusal:
        raise JfbenchError(f"drafter {name!r} cannot run from the command line: {refusal}")
    return canonical


def __getattr__(name: str) -> Any:
    """`Drafter` loads on first use (it imports torch): `--help` reads the family registrations above."""
    if name == "Drafter":
        from jetflow_bench.engine.drafter import Drafter

        return Drafter
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DRAFTERS", "Drafter", "export_head", "runnable_drafter"]
