"""The CLI run in this process outside a test function (module fixtures, helpers); tests use the `cli` fixture."""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path


def jfbench(*args: str | Path) -> tuple[int, str, str]:
    """Run the CLI in this process: (exit code, stdout, stderr)."""
    from jetflow_bench.cli import main

    out, err = io.StringIO(), io.StringIO()
    argv, sys.argv = sys.argv, ["jfbench", *map(str, args)]
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exit_:
        code = exit_.code or 0
    finally:
        sys.argv = argv
    return code, out.getvalue(), err.getvalue()
