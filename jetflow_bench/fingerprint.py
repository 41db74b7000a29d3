"""Identity of a model's weights, independent of where the folder happens to live.

Cache keys (trained heads, regenerated data) and sweep config hashes use it, so that the same
weights under another path (a CI clone's cache, another user's home) hash the same.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def model_fingerprint(name: str | Path) -> str:
    """A toy target's config hash; a local folder's config.json + weight file sizes; else the hub id.

    Our heads' config.json records their training run (losses included), so two trainings differ.
    """
    folder = Path(name)
    if not folder.is_dir():
        return str(name)  # a hub id names its weights
    toy = folder / "jfbench_toy.json"
    if toy.is_file():
        return "toy:" + json.loads(toy.read_text()).get("config_hash", "")
    sizes = sorted((f.name, f.stat().st_size) for f in folder.glob("*.safetensors"))
    blob = (folder / "config.json").read_text() + json.dumps(sizes)
    return "dir:" + hashlib.sha256(blob.encode()).hexdigest()[:16]
