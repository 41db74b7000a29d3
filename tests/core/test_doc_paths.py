"""The docs name files and modules that exist.

The bug this catches: a module moves (as `jetflow_bench/metrics.py` moved into `measure/`) and a
page of docs/ or the README still sends readers to the old path or dotted name.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = (*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md")
CODE_FOLDERS = ("jetflow_bench", "drafters", "suites", "tests", "docs", "scripts")  # run outputs (results/demo) are not checked
PATH = re.compile(r"`([\w.\-/]+/[\w.\-/]*)`")  # a backticked path with a slash
DOTTED = re.compile(r"\bjetflow_bench(?:\.\w+)+")


def _defines(source: str, name: str) -> bool:
    """Whether a module's ``source`` defines or imports ``name``."""
    return re.search(rf"^\s*(def|class)\s+{name}\b|^\s*{name}\s*[:=]|^from .* import .*\b{name}\b|\"{name}\"",
                     source, re.M) is not None


def missing_dotted(name: str) -> str | None:
    """Why the dotted ``name`` (a module, then perhaps an attribute) names nothing; None if it does."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:i])
        source = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if source.is_file():
            if i == len(parts) or (i > 1 and _defines(source.read_text(), parts[i])):
                return None
            return f"{'.'.join(parts[:i])} has no {parts[i]}"
    return "no such module"


def test_every_named_path_exists():
    missing = [f"{page.name}: {path}" for page in PAGES for path in PATH.findall(page.read_text())
               if path.split("/")[0] in CODE_FOLDERS and not (ROOT / path).exists()]
    assert missing == []


def test_every_dotted_module_name_exists():
    missing = {f"{page.name}: {name} ({why})" for page in PAGES for name in DOTTED.findall(page.read_text())
               if (why := missing_dotted(name)) is not None}
    assert sorted(missing) == []


def test_dotted_names_are_checked_past_the_package():
    """Guards the checker: a moved flat module is not read as an attribute of the package root."""
    assert missing_dotted("jetflow_bench.measure.metrics") is None
    assert missing_dotted("jetflow_bench.sweep.engines.Engine") is None
    assert missing_dotted("jetflow_bench.metrics") is not None
    assert missing_dotted("jetflow_bench.sweep.metrics") is not None
