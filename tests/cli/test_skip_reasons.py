"""The README's test command needs no data folder: no test skips for want of one.

82 tests used to skip without JFBENCH_DATA_DIR, although the README said the tests need none: each
test module had its own "needs the shared data folder" skip, and later 19 tests of the real files'
contents still skipped through one marker. Tests now read the made-up folder
(tests/helpers/benchmark_data.py); those of the files' contents take `conftest.data_folder`, which adds the
real folder where JFBENCH_DATA_DIR is set. This reads every test module's skips (without running
them) and counts the data skips by module.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from tests.helpers.skips import skip_kind

TESTS = Path(__file__).parents[1]


def skip_reasons(module: Path) -> list[str]:
    """The literal reasons of every skip in ``module``: skipif(..., reason=...), skip(...), skip(reason=...)."""
    reasons = []
    for node in ast.walk(ast.parse(module.read_text())):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        if node.func.attr not in {"skip", "skipif", "importorskip"}:
            continue
        texts = [kw.value for kw in node.keywords if kw.arg == "reason"]
        if node.func.attr == "skip":
            texts += node.args[:1]
        reasons += [ast.unparse(t) for t in texts]
    return reasons


def test_no_test_skips_for_want_of_data() -> None:
    data_skips = Counter(
        module.name
        for module in TESTS.rglob("*.py")
        for reason in skip_reasons(module)
        if skip_kind(reason) == "need the real data folder"
    )
    assert data_skips == Counter(), (f"skips for want of a data folder: {dict(data_skips)}; use benchmark_data_dir() "
                                     "or, for the files' contents, the data_folder fixture")


def test_the_skip_kinds() -> None:
    # Bug caught: the summary line files a data skip under "other", hiding it.
    assert skip_kind("checks the real benchmark files: set JFBENCH_DATA_DIR") == "need the real data folder"
    assert skip_kind("vLLM is not installed (run `jfbench vllm setup`)") == "need vLLM's environment"
    assert skip_kind("no C/C++ compiler on PATH") == "other (a tool or device absent here)"
