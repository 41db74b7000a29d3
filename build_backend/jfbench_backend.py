"""setuptools' PEP 517 backend plus one file: ``jetflow_bench_lm_eval.pth`` in every wheel.

A ``.pth`` file at the top of site-packages runs its ``import`` line when Python starts; this one
installs `jetflow_bench.integrations.lm_eval_hook`, which registers the ``jfbench`` model with
lm-evaluation-harness releases that have no plug-in discovery (``python -m lm_eval --model
jfbench``). setuptools cannot place a file there from pyproject.toml, and its editable wheels
ignore what build commands add, so the built wheel (regular or editable) gets it here, listed in
its RECORD so that ``pip uninstall`` removes it.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (every other hook is setuptools' own)

PTH_NAME = "jetflow_bench_lm_eval.pth"
PTH_TEXT = "import jetflow_bench.integrations.lm_eval_hook as hook; hook.install()\n"


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    add_pth(Path(wheel_directory) / name)
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    name = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    add_pth(Path(wheel_directory) / name)
    return name


def add_pth(wheel: Path) -> None:
    """Rewrite ``wheel`` with the .pth file at its root and a RECORD line for it."""
    data = PTH_TEXT.encode()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    with zipfile.ZipFile(wheel) as source:
        entries = [(info, source.read(info)) for info in source.infolist()]
    staged = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as target:
        for info, content in entries:
            if info.filename.endswith(".dist-info/RECORD"):
                content += f"{PTH_NAME},sha256={digest},{len(data)}\n".encode()
            target.writestr(info, content)
        target.writestr(PTH_NAME, data)
    staged.replace(wheel)
