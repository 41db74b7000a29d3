"""A drafter family from outside the package, as one folder plus one registration line: it trains,
drafts, ablates and exports unchanged.

The family is `tests/drafters/next_token/` (its `Family` record in ``__init__.py``, its drafter and
objective in ``drafter.py``); `family` registers it with one `register_family` call, as a third
party's package would on import. Then `jfbench train --drafter next-token`, `jfbench sweep`,
`jfbench ablate --guesses 1,2` and `jfbench export --format next-token-copy` run it on the micro
target like a built-in family. A bare drafter class in the ``jfbench.drafters`` entry-point group
(the spelling before families) keeps working: `test_a_bare_drafter_class_still_trains_as_its_own_family`.

Bugs this catches: the training package branching on drafter names again (the train command
would refuse or train another family's objective: the recorded layout, the head depth and the
trained weights say which); the sweep failing to build or verify a plug-in's drafts (lossless
with accepted drafts, against the AR baseline of the same run); a family's axes or export format
not reaching `ablate` / `export` (the variant flag is refused, the format unknown).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.plugins import (
    DRAFTERS,
    FAMILIES,
    drafting_options,
    family_of,
    family_options,
    legacy_family,
    objective_for,
    register_family,
)
from jetflow_bench.plugins.ablation_axes import ABLATION_AXES, AblationAxes
from jetflow_bench.training.recipe import RECIPES
from tests.drafters.next_token import FAMILY, GUESSES, NAME
from tests.drafters.next_token.drafter import NEXT_TOKEN_TRAINING, NextTokenDrafter
from tests.helpers.data_dirs import benchmark_data_dir

DATA = benchmark_data_dir()  # the made-up folder where no data folder is given
RECIPE = ["--steps", "40", "--prompts", "96", "--max-new-tokens", "96", "--seq-len", "160", "--batch-size", "4",
          "--anchors", "8"]  # the quick heads' data (cached regen), so only the head trains here


@pytest.fixture
def registries(monkeypatch):
    """The family and drafter registries, restored after the test (built-ins loaded first, so they stay)."""
    for registry in (FAMILIES, DRAFTERS):
        registry.names()
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))
        monkeypatch.setattr(registry, "_aliases", dict(registry._aliases))


@pytest.fixture
def family(registries):
    """The family registered as a third party would: one line."""
    register_family(FAMILY)
    return NAME


@pytest.mark.slow
def test_an_outside_family_trains_drafts_ablates_and_exports(family, micro_target, cli, tmp_path):
    common = ["--target", str(micro_target), "--data-dir", str(DATA), "--device", "cpu"]
    code, out, err = cli("train", "--drafter", family, "--out", str(tmp_path / "head"), *RECIPE, *common)
    assert code == 0, err
    head = Path(out.strip().splitlines()[-2])
    saved = json.loads((head / "config.json").read_text())
    assert saved["drafter"] == NAME and saved["num_hidden_layers"] == 1  # its own objective chose the depth
    assert saved["training"]["block_layout"] is None  # no block-family setting leaked into its recipe
    losses = saved["training"]["losses"]
    assert sum(losses[-5:]) < 0.8 * sum(losses[:5])

    run = ["--suites", "gsm8k", "--limit", "2", "--max-new-tokens", "32", "--repeats", "1", "--no-progress", *common]
    code, _, err = cli("sweep", "--drafters", f"{family}={head}", "--budgets", "1,2,8", "--out", str(tmp_path / "run"),
                       "--strict", *run)
    assert code == 0, err
    requests = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    steps = pd.read_parquet(tmp_path / "run" / "steps.parquet")
    arm = requests[requests["drafter"] == NAME]
    assert len(arm) == 6 and arm["lossless"].all()
    drafted = steps[steps["drafter"] == NAME]
    assert drafted.groupby("budget")["drafted"].max().to_dict() == {1: 0, 2: 1, 8: 1}
    assert drafted["accepted"].sum() > 0, "a trained head should get some drafts accepted"

    code, _, err = cli("ablate", "--drafter", f"{family}={head}", "--guesses", "2,3", "--budgets", "8",
                       "--out", str(tmp_path / "ablation"), *run)
    assert code == 0, err
    table = pd.read_parquet(tmp_path / "ablation" / "ablation.parquet")
    assert sorted(table["variant"]) == ["guesses=2", "guesses=3"]
    steps = pd.read_parquet(tmp_path / "ablation" / "steps.parquet")
    assert steps.groupby("variant")["drafted"].max().to_dict() == {"default": 1, "guesses=2": 2, "guesses=3": 3}

    code, out, err = cli("export", str(head), "--format", "next-token-copy", "--out", str(tmp_path / "served"))
    assert code == 0, err
    assert json.loads((tmp_path / "served" / "config.json").read_text()) == saved


def test_the_family_record_is_its_one_declaration(family):
    """Drafter lookups, the objective and the drafting flags all come from the one registration."""
    assert DRAFTERS.get(NAME) is NextTokenDrafter and family_of(NAME) is FAMILY
    assert objective_for(NAME) == (NAME, NEXT_TOKEN_TRAINING)


def test_an_installed_package_registers_its_family_by_entry_point(registries, monkeypatch):
    """A package's ``jfbench.families`` entry point adds its family with the built-ins; one naming
    anything but a record is refused in one line naming it."""
    from jetflow_bench import plugins

    class EntryPoint:
        name, value = NAME, "tests.next_token:FAMILY"

        def load(self):
            return FAMILY if self.value.endswith("FAMILY") else NextTokenDrafter

    monkeypatch.setattr(plugins, "entry_points", lambda group: [EntryPoint()] if group == "jfbench.families" else [])
    plugins.load_family_entry_points()
    assert family_of(NAME) is FAMILY
    EntryPoint.value = "tests.next_token.drafter:NextTokenDrafter"
    with pytest.raises(JfbenchError, match=r"'tests.next_token.drafter:NextTokenDrafter' \(group jfbench.families\) is not a Family"):
        plugins.load_family_entry_points()


def test_a_bare_drafter_class_still_trains_as_its_own_family(registries, monkeypatch):
    """The spelling before families: a `Drafter` class with a ``training`` attribute, registered alone
    (as the ``jfbench.drafters`` entry-point group registers it), its recipe options and axes in the
    old ``jfbench.recipes`` / ``jfbench.ablation_axes`` groups' registries."""

    class Bare(NextTokenDrafter):
        name = "bare"
        training = NEXT_TOKEN_TRAINING

    for registry in (RECIPES, ABLATION_AXES):
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))
    DRAFTERS.register("bare", Bare)
    RECIPES.register("bare", (GUESSES,))
    ABLATION_AXES.register("bare", AblationAxes((GUESSES,)))
    assert objective_for("bare") == ("bare", NEXT_TOKEN_TRAINING) and legacy_family("bare").drafters == {"bare": Bare}
    assert family_options("bare") == (GUESSES,) and "guesses" in drafting_options()


def test_a_drafter_without_an_objective_is_refused_in_one_line(cli, tmp_path):
    code, _, err = cli("train", "--drafter", "ngram", "--target", str(tmp_path), "--out", str(tmp_path / "h"))
    assert code == 2
    assert err.strip().splitlines()[-1].startswith("error: --drafter 'ngram' declares no training objective")
    assert "eagle" in err and "ngram" not in err.split("train one of")[1]
