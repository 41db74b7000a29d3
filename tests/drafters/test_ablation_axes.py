"""Ablation axes declared by the families that own them (`jetflow_bench.plugins.Family.axes`).

The bugs these catch: shared code that still hard-codes a drafter's axis or clash (a plug-in's
declaration would be ignored), a drafting flag `ablate` no longer accepts or `train` wrongly
accepts, and a bad axis value that reaches a model load instead of a one-line error.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from jetflow_bench.cli.recipe_flags import family_flags
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.plugins import FAMILIES
from jetflow_bench.plugins.ablation_axes import AblationAxes, CommonSetting
from jetflow_bench.sweep.ablate_plan import plan_ablation
from jetflow_bench.training.recipe import RecipeOption

MAX_NGRAM = RecipeOption("max_ngram", int, None, minimum=1, help="longest n-gram matched")
# ngram refuses min_ngram > max_ngram: a 1-gram variant of a min_ngram=2 base needs min_ngram=1 on both arms.
ONE_GRAM = CommonSetting(("max_ngram", 1), "infer", "min_ngram", 1, "a 1-gram match needs min_ngram=1")


@pytest.fixture
def ngram_axes(monkeypatch):
    """ngram's record declares an axis and a common setting, as a third-party family would (this test only)."""
    FAMILIES.names()  # the built-ins register first, so the restored registry keeps them
    monkeypatch.setattr(FAMILIES, "_entries", dict(FAMILIES._entries))  # restored after the test
    FAMILIES._entries["ngram"] = dataclasses.replace(FAMILIES.get("ngram"), axes=AblationAxes((MAX_NGRAM,), (ONE_GRAM,)))


def test_a_declared_axis_becomes_an_ablate_flag_with_its_common_setting(ngram_axes):
    assert family_flags(["--max-ngram", "1,3"], drafting=True) == {"max_ngram": "1,3"}
    with pytest.raises(JfbenchError, match="unexpected argument '--max-ngram'"):
        family_flags(["--max-ngram", "1"])  # `train` takes recipe fields only
    plan = plan_ablation("ngram[min_ngram=2]", {"max_ngram": "1,3"}, {}, {}, None)
    by_name = {s.variant: s for s in plan.specs}
    assert dict(by_name["max_ngram=1"].options) == {"max_ngram": 1, "min_ngram": 1}
    assert dict(by_name["min_ngram=1"].options) == {"min_ngram": 1}  # the base moved to the common setting
    assert plan.comparisons["max_ngram=1"].reference == "min_ngram=1"
    assert "a 1-gram match" in plan.comparisons["max_ngram=1"].held
    assert plan.comparisons["max_ngram=3"].reference == "default"  # no clash: compared with the base itself
    with pytest.raises(JfbenchError, match="--max-ngram '0' must be at least 1"):
        plan_ablation("ngram", {"max_ngram": "0"}, {}, {}, None)
    with pytest.raises(JfbenchError, match=r"use its own flag \(--max-ngram\)"):
        plan_ablation("ngram", {}, {"max_ngram": "2"}, {}, None)


def test_built_in_drafting_flags_are_checked_against_the_base_and_the_declaration(cli, tmp_path: Path):
    run = ("ablate", "--target", "t", "--out", str(tmp_path / "run"))
    code, _, err = cli(*run, "--drafter", "ngram", "--refine-passes", "0,2")
    assert code == 2 and "drafter 'ngram' has no option 'refine_passes'" in err  # a flag, refused for this base
    code, _, err = cli(*run, "--drafter", "jetflow", "--scoring", "logp,bogus")
    assert code == 2 and "--scoring 'bogus' is unknown: choose one of logp, entropy" in err
    code, out, _ = cli("ablate", "--help")
    assert code == 0 and "--refine-passes INT >= 0" in out and "--construction accum|best-first" in out
