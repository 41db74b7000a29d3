"""`jfbench --help` starts fast: registering the commands and printing any command's help imports no
model, table or plotting library.

The bug this catches: a command module that imports torch (or transformers, pandas, the toy-target
trainer, ...) at its top. Every `jfbench` invocation, `--help` included, then pays seconds for it. The
check is on modules, not on wall time: it fails the same way on a fast and on a loaded machine.
"""

from __future__ import annotations

import json
import subprocess
import sys

# Modules that cost a large share of a second (or more) to import. `jetflow_bench.toy.build` and
# `jetflow_bench.training.loop` stand for "toy-target / head-training code".
HEAVY = (
    "torch", "transformers", "pandas", "pyarrow", "numpy", "matplotlib", "seaborn", "tokenizers", "datasets",
    "jetflow_bench.toy.build", "jetflow_bench.training.loop", "jetflow_bench.engine.loop", "jetflow_bench.engine.drafter",
)

# Runs `jfbench --help` and `jfbench <command> [<sub>] --help` for every registered command through the
# console-script entry point, then reports what got imported.
SCRIPT = r"""
import contextlib, importlib, io, json, sys
import typer
from jetflow_bench.cli import COMMAND_MODULES, app, main

culprit = {}  # heavy module -> the step that first loaded it

def _note(step):
    for m in HEAVY:
        if m in sys.modules and m not in culprit:
            culprit[m] = step

def _paths(command, prefix):
    yield prefix
    if hasattr(command, "commands"):  # a group (typer may vendor its own click)
        for name, sub in command.commands.items():
            yield from _paths(sub, [*prefix, name])

for module in COMMAND_MODULES:
    importlib.import_module(f"jetflow_bench.cli.{module}")
    _note(f"importing jetflow_bench.cli.{module}")
helped = []
for argv in _paths(typer.main.get_command(app), []):
    sys.argv = ["jfbench", *argv, "--help"]
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            main()
        except SystemExit as stop:
            assert not stop.code, (argv, stop.code)
    assert "Usage" in out.getvalue(), argv
    helped.append(" ".join(argv))
    _note(" ".join(sys.argv))
print(json.dumps({"helped": helped, "loaded": culprit}))
"""


def _import_chain(importtime: str, module: str) -> list[str]:
    """``[..., importer, module]``: the import statements that first loaded ``module``, from `-X importtime`.

    Its lines come in post-order (a module after everything it imported), indented by depth, so a
    module's importer is the next line one level shallower. (`importlib.import_module` calls are not
    logged, which is why the script also names the step that loaded each module.)
    """
    rows = []
    for line in importtime.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1]
            rows.append((len(name) - len(name.lstrip()), name.strip()))
    for i, (depth, name) in enumerate(rows):
        if name == module:
            chain = [name]
            for d, n in rows[i + 1:]:
                if d < depth:
                    chain.insert(0, n)
                    depth = d
            return chain
    return [module]


def test_help_imports_no_heavy_module():
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"HEAVY = {HEAVY!r}\n{SCRIPT}"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    # The walk really covered the command tree (a broken walk would pass vacuously).
    assert {"", "sweep", "bench", "bench baseline", "target train", "check"} <= set(result["helped"])
    chains = {m: f"{step}: {' -> '.join(_import_chain(proc.stderr, m))}" for m, step in result["loaded"].items()}
    assert not chains, f"--help imported heavy modules (move the import into the command function): {chains}"


def test_import_chain_names_the_importer():
    # Post-order, indented: c was imported by b, b by a.
    text = "\n".join([
        "import time: self [us] | cumulative | imported package",
        "import time:        5 |          5 |     c",
        "import time:        5 |         10 |   b",
        "import time:        5 |          5 |   other",
        "import time:        5 |         20 | a",
    ])
    assert _import_chain(text, "c") == ["a", "b", "c"]
    assert _import_chain(text, "other") == ["a", "other"]
