"""Committed run folders and heads keep their hashes under the one rule of `hashing.hashed_fields`.

The bugs this catches: a field that hashes have always covered dropped at its default (every
earlier run folder would stop resuming and the CI reference would no longer pair), a field added
later hashed at its default (the same), or a training-recipe field recorded differently (every
cached head would retrain). The recorded hashes were made on other machines; the weights' part of
them is restored from the folder names (a toy target's folder ends in its config hash) and the one
catalog target's pinned wheel.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from jetflow_bench.core.hashing import hashed_fields

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((ROOT / "results").rglob("manifest.json"))
SMOLLM2 = "named:smollm2-135m-instruct:bcc81830d10ce7d9"  # its jfbench_target.json: name and sha256[:16]


def _fingerprint(path: str) -> str | None:
    """The weights' fingerprint a recorded target path stood for, where its name says it."""
    if "smollm2-135m-instruct" in path:
        return SMOLLM2
    toy = re.search(r"-seed\d+-([0-9a-f]{10})$", path)
    return f"toy:{toy.group(1)}" if toy else None


def _known(manifest: Path) -> bool:
    return _fingerprint(json.loads(manifest.read_text())["config"]["target"]) is not None


KNOWN = [m for m in MANIFESTS if _known(m)]


def test_most_committed_runs_have_a_known_target():
    assert len(KNOWN) >= 70 and len(MANIFESTS) - len(KNOWN) <= 2  # else the test below checks little


@pytest.mark.parametrize("manifest", KNOWN, ids=lambda m: str(m.parent.relative_to(ROOT / "results")))
def test_committed_runs_keep_their_hashes(manifest: Path, monkeypatch):
    """The settings hash of every committed run (the target and settings, not the arms), and the
    whole config hash where no arm has a checkpoint (whose weights are not committed)."""
    from jetflow_bench.sweep import grid

    monkeypatch.setattr(grid, "model_fingerprint", lambda path: _fingerprint(str(path)) or f"weights of {path}")
    record = json.loads(manifest.read_text())
    identity = grid.config_identity(record["config"])
    if "settings_hash" in record:
        assert grid.stable_hash(grid.without_grid(identity)) == record["settings_hash"]
    if not any(d["checkpoint"] for d in record["config"]["drafters"]):
        assert grid.stable_hash(identity) == record["config_hash"]


def test_committed_heads_keep_their_recipe_records():
    """A head's cache key hashes its recipe record (`TrainConfig.to_dict`): every committed head's
    recorded recipe read back gives the same record."""
    from jetflow_bench.training.config import canonical_head, train_config

    heads = [json.loads(p.read_text())["training"]["config"] for p in sorted((ROOT / "results").rglob("config.json"))
             if '"training"' in p.read_text()]
    assert len(heads) >= 30
    for recorded in heads:
        recorded = {**recorded, "head": canonical_head(recorded.get("head"))}
        fields = {k: v for k, v in recorded.items() if k != "drafter"}
        assert train_config(recorded["drafter"], **fields).to_dict() == recorded


def test_a_field_added_later_is_hashed_only_when_set():
    @dataclasses.dataclass
    class Before:
        a: int
        b: int = 0

    @dataclasses.dataclass
    class After(Before):
        c: tuple[int, ...] = ()

    assert hashed_fields(dataclasses.asdict(After(1, 0)), After, always=("b",)) == dataclasses.asdict(Before(1, 0))
    assert hashed_fields(dataclasses.asdict(After(1, 0, (2,))), After, always=("b",)) == {"a": 1, "b": 0, "c": (2,)}
    assert hashed_fields({"a": 1, "b": 0, "c": []}, After) == {"a": 1}  # a plain record's list equals a tuple default
