"""A head is pinned to the target it was trained on and to its family.

Same shapes, other weights: a head trained on one `micro` target and swept with another drafted
τ 1.07 instead of 1.96 without a word, and an EAGLE head under `jetflow=` ran at τ 1.00. These
checks read config.json files only, so the heads and targets here are their records alone, but for
one ablation that runs (a real head whose record names another target).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from jetflow_bench.core.arms import DEFAULT_VARIANT
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.fingerprint import model_fingerprint
from jetflow_bench.sweep.arms import OTHER_TARGET, pin_heads, sweep_arms
from jetflow_bench.sweep.grid import DrafterSpec
from jetflow_bench.toy.presets import MARKER
from tests.helpers.data_dirs import made_up_data_dir


def toy_target(cache: Path, name: str, config_hash: str) -> Path:
    """A cached toy target's folder as `--target micro` finds it (the marker is all it reads)."""
    folder = cache / "targets" / name
    folder.mkdir(parents=True)
    (folder / MARKER).write_text(json.dumps({"config_hash": config_hash}))
    return folder


def head(folder: Path, drafter: str, target: Path | None) -> Path:
    """A jfbench head's config.json as `jfbench train` records it (``target``: trained on it)."""
    folder.mkdir(parents=True)
    training = {"target_fingerprint": model_fingerprint(target)} if target else {}
    (folder / "config.json").write_text(json.dumps({"format": "jfbench-head", "drafter": drafter, "training": training}))
    return folder


def one_line_error(result: tuple[int, str, str]) -> str:
    code, out, err = result
    assert code == 2 and out == "" and "Traceback" not in err, result
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_the_demos_heads_with_the_test_suites_micro_target_are_refused(cli, tmp_path: Path, monkeypatch) -> None:
    # Bug: the README's test command trained a second micro target, `--target micro` then resolved
    # to it, and the demo's heads drafted for it at a third of their τ with rc 0.
    monkeypatch.setenv("JFBENCH_CACHE", str(tmp_path / "cache"))
    demo = toy_target(tmp_path / "cache", "micro-seed0-d0f2b6000d", "demo")
    tests = toy_target(tmp_path / "cache", "micro-seed0-6189764f1d", "tests")  # newer: `--target micro` picks it
    jetflow = head(tmp_path / "heads" / "jetflow", "jetflow", demo)
    err = one_line_error(cli("sweep", "--target", "micro", "--drafters", f"jetflow={jetflow}", "--limit", "1",
                             "--out", str(tmp_path / "run")))
    assert model_fingerprint(demo) in err and model_fingerprint(tests) in err  # both fingerprints named
    assert "jfbench train --drafter jetflow --target micro" in err and "--allow-other-target" in err
    assert not (tmp_path / "run").exists()


def test_a_head_used_with_its_own_target_passes_and_a_deliberate_transfer_is_marked(tmp_path: Path) -> None:
    # Bug caught: the check refuses a head on its own target, or a transfer is not marked in the arm's name.
    own, other = toy_target(tmp_path, "micro-seed0-a", "a"), toy_target(tmp_path, "micro-seed0-b", "b")
    spec = DrafterSpec("jetflow", checkpoint=str(head(tmp_path / "jf", "jetflow", own)))
    assert pin_heads([spec], str(own)) == [spec]
    with pytest.raises(JfbenchError, match="--allow-other-target"):
        pin_heads([spec], str(other))
    (moved,) = pin_heads([spec], str(other), allow_other_target=True)
    assert moved.label == f"jetflow[{OTHER_TARGET}]"
    depth = DrafterSpec("jetflow", variant="depth=3", checkpoint=spec.checkpoint)
    assert pin_heads([depth], str(other), allow_other_target=True)[0].label == f"jetflow[depth=3,{OTHER_TARGET}]"


def test_heads_that_record_no_target_are_not_refused(tmp_path: Path) -> None:
    # Bug caught: released heads (and heads trained before the record) become unusable.
    target = toy_target(tmp_path, "micro-seed0-a", "a")
    old = DrafterSpec("jetflow", checkpoint=str(head(tmp_path / "old", "jetflow", None)))
    released = tmp_path / "released"
    released.mkdir()
    (released / "config.json").write_text(json.dumps({"dflash_config": {}}))
    assert pin_heads([old, DrafterSpec("dflash", checkpoint=str(released))], str(target))[0] == old


def test_ablate_refuses_another_targets_head_in_one_line_naming_the_flag(cli, tmp_path: Path) -> None:
    # Bug caught: ablate takes a head of another target silently, or refuses it after training the variants.
    a, b = toy_target(tmp_path, "micro-seed0-a", "a"), toy_target(tmp_path, "micro-seed0-b", "b")
    jetflow = head(tmp_path / "jf", "jetflow", a)
    err = one_line_error(cli("ablate", "--target", str(b), "--drafter", f"jetflow={jetflow}", "--construction",
                             "best-first", "--out", str(tmp_path / "run")))
    assert model_fingerprint(a) in err and "jfbench train --drafter jetflow" in err and "--allow-other-target" in err
    assert not (tmp_path / "run").exists()


def test_an_ablated_transfer_refuses_a_variant_head_of_this_target(cli, tmp_path: Path) -> None:
    # Bug: the transferred default vs a variant trained on --target changes two factors, reported as one.
    a, b = toy_target(tmp_path, "micro-seed0-a", "a"), toy_target(tmp_path, "micro-seed0-b", "b")
    jetflow, causal = head(tmp_path / "jf", "jetflow", a), head(tmp_path / "causal", "jetflow", b)
    err = one_line_error(cli("ablate", "--target", str(b), "--drafter", f"jetflow={jetflow}", "--head", "causal",
                             "--checkpoint", f"head=causal={causal}", "--allow-other-target", "--out", str(tmp_path / "run")))
    assert "jetflow[head=causal]'s head is not from target" in err and "two factors" in err
    assert not (tmp_path / "run").exists()


def test_an_ablated_transfer_keeps_the_default_variant_and_is_marked(
    cli, micro_target: Path, learned_heads: dict[str, Path], tmp_path: Path, monkeypatch  # noqa: F811 (the fixture)
) -> None:
    # Bug caught: --allow-other-target renames the base arm (the deltas lose their default) or the
    # transfer is marked nowhere in `show`, the delta table or the manifest.
    monkeypatch.setenv("COLUMNS", "200")
    other = toy_target(tmp_path, "micro-seed0-other", "other")
    moved = tmp_path / "moved"
    shutil.copytree(learned_heads["jetflow"], moved)
    config = json.loads((moved / "config.json").read_text())
    config["training"]["target_fingerprint"] = model_fingerprint(other)  # as if trained on the other micro target
    (moved / "config.json").write_text(json.dumps(config))
    out = tmp_path / "run"
    args = ("ablate", "--target", str(micro_target), "--drafter", f"jetflow={moved}", "--construction", "best-first",
            "--suites", "gsm8k", "--budgets", "4", "--repeats", "1", "--limit", "2", "--max-new-tokens", "6",
            "--data-dir", str(made_up_data_dir()), "--threads", "1", "--no-progress", "--out", str(out))
    assert "--allow-other-target" in one_line_error(cli(*args))
    code, _, err = cli(*args, "--allow-other-target")
    assert code == 0, err
    assert set(pd.read_parquet(out / "summary.parquet")["variant"]) == {DEFAULT_VARIANT, "construction=best-first"}
    table = pd.read_parquet(out / "ablation.parquet")
    assert list(table["compared_with"]) == [DEFAULT_VARIANT] and list(table["other_target"]) == [model_fingerprint(other)]
    code, text, _ = cli("show", str(out))
    assert code == 0 and f"jetflow[construction=best-first,{OTHER_TARGET}]" in text and f"{DEFAULT_VARIANT},{OTHER_TARGET}" in text
    assert f"every head was trained on target {model_fingerprint(other)}" in text
    from jetflow_bench.report.loading import load_run
    from jetflow_bench.report.tables import manifest_items

    assert dict(manifest_items(load_run(out)))["every head trained on another target (--allow-other-target)"] == \
        model_fingerprint(other)  # the report's provenance table


@pytest.mark.parametrize(("arm", "trained_as", "refused"), [
    ("jetflow", "eagle", True), ("dflash", "jetflow", True), ("eagle", "jetflow", True),
    ("jetflow-refine", "jetflow", False), ("eagle3", "eagle", False), ("jetflow", "jetflow", False),
])
def test_a_head_loads_only_under_its_own_family(tmp_path: Path, arm: str, trained_as: str, refused: bool) -> None:
    # Bug: `--drafters jetflow=<an eagle head>` ran with rc 0 and τ 1.00.
    folder = head(tmp_path / "h", trained_as, None)
    if not refused:
        assert sweep_arms(f"{arm}={folder}", "hf")[0].checkpoint == str(folder)
        return
    with pytest.raises(JfbenchError, match=f"trained as '{trained_as}', not") as err:
        sweep_arms(f"{arm}={folder}", "hf")
    assert f"{trained_as}={folder}" in str(err.value) and "\n" not in str(err.value)


def test_a_wrong_family_head_is_one_line_on_the_command_line(cli, tmp_path: Path) -> None:
    # Bug: the refusal is a traceback, or comes after the target loaded.
    eagle = head(tmp_path / "eagle", "eagle", None)
    target = toy_target(tmp_path, "micro-seed0-a", "a")
    err = one_line_error(cli("sweep", "--target", str(target), "--drafters", f"jetflow={eagle}", "--out", str(tmp_path / "run")))
    assert f"trained as 'eagle', not 'jetflow': write the arm as eagle={eagle}" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("train", "layout", "refused"), [
    ((("head", "bidirectional"),), None, False),  # claim 2's bidirectional arm reads its dflash twin
    ((("head", "bidirectional"), ("seed", 1)), "mask", False),
    ((), None, True),  # a plain jetflow arm would label a bidirectional head "jetflow"
    ((("loss", "rkl"),), None, True),
    ((("head", "bidirectional"),), "prefix", True),  # prefix blocks: not the all-mask twin
])
def test_a_dflash_head_serves_only_as_jetflows_bidirectional_twin(tmp_path: Path, train, layout, refused) -> None:
    from jetflow_bench.sweep.arms import check_family

    folder = head(tmp_path / "h", "dflash", None)
    record = json.loads((folder / "config.json").read_text())
    record["training"]["config"] = {"drafter": "dflash", "head": "bidirectional", "layout": layout}
    (folder / "config.json").write_text(json.dumps(record))
    spec = DrafterSpec("jetflow", checkpoint=str(folder), train=train)
    if not refused:
        check_family(spec)
        return
    with pytest.raises(JfbenchError, match="trained as 'dflash', not 'jetflow'"):
        check_family(spec)
