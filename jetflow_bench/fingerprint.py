"""Identity of a model's weights, independent of where the folder happens to live.

Cache keys (trained heads, regenerated data) and sweep config hashes use it, so that the same
weights under another path (a CI clone's cache, another user's home) hash the same.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

HASH_CONTENT_UP_TO = 256 * 2**20  # weight bytes; bigger folders are named by file sizes (hashing GBs is slow)


def model_fingerprint(name: str | Path) -> str:
    """A toy target's config hash; a local folder's config + weights; else the hub id.

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
    config = json.loads((folder / "config.json").read_text())
    config.pop("training", None)
    if isinstance(config.get("target"), dict):
        config["target"] = {k: v for k, v in config["target"].items() if k != "name"}
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode())
    weights = sorted(folder.glob("*.safetensors"))
    by_content = sum(f.stat().st_size for f in weights) <= HASH_CONTENT_UP_TO
    for f in weights:
        digest.update(f.name.encode())
        digest.update(f.read_bytes() if by_content else str(f.stat().st_size).encode())
    return "dir:" + digest.hexdigest()[:16]
