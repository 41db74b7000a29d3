"""`jfbench bench drafter`'s split: the parts are measured, add up, and leave the drafter as it was.

Bugs these catch: head time not recorded (wrapper on the wrong object), tree spans outside the
draft span (rest < 0), a nested span counted twice, wrappers left on the drafter after the run
(every later propose would sync and time itself), the timer left active.
"""

from __future__ import annotations

import json
import time

import torch

from drafters import DRAFTERS, timing
from drafters.timing import SplitTimer, span
from jetflow_bench.bench.drafter import split_drafter
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.stopping import StopRule
from tests.helpers.data_dirs import benchmark_data_dir
from tests.helpers.heads import PROMPTS


def test_nested_spans_count_once_per_label():
    timer = SplitTimer(torch.device("cpu"))
    with timing.timing(timer):
        with span("draft"), span("tree"), span("tree"):
            time.sleep(0.01)
        with span("tree"):
            pass
    assert timer.seconds["tree"] <= timer.seconds["draft"] + 1e-3  # the inner "tree" was not added twice
    assert timer.seconds["draft"] >= 0.01
    assert timing._ACTIVE is None


def test_split_adds_up_and_unwraps(target, checkpoints):  # noqa: F811
    stop = StopRule(12)
    for name in ("eagle", "dflash", "jetflow"):
        drafter = DRAFTERS.get(name).build(target, checkpoints[name])
        split = split_drafter(name, drafter, target, [PROMPTS], stop, 16, ar_ms=1.0)
        assert split.steps > 0 and split.draft_ms > 0
        assert split.head_ms > 0 and split.tree_ms > 0
        assert split.head_ms + split.tree_ms <= split.draft_ms * 1.001
        assert 0 <= split.non_forward_share <= 1
        assert "propose" not in vars(drafter) and "forward" not in vars(drafter.head)  # class methods again
    assert timing._ACTIVE is None


def test_every_batch_is_timed(target, checkpoints):  # noqa: F811
    """Two batches of one prompt: the split counts both runs' forwards (a bug timing only the first,
    or the warm-up, would count one) and stays batch 1."""
    stop = StopRule(12)
    drafter = DRAFTERS.get("dflash").build(target, checkpoints["dflash"])
    one = [split_drafter("dflash", drafter, target, [[p]], stop, 16, ar_ms=1.0) for p in PROMPTS]
    both = split_drafter("dflash", drafter, target, [[p] for p in PROMPTS], stop, 16, ar_ms=1.0)
    assert both.steps == sum(s.steps for s in one) and both.batch_size == 1


def test_cli_rows_per_arm_and_budget(target, checkpoints):  # noqa: F811
    """The command parses arms like the sweep (options in brackets) and prints one row per arm x budget."""
    from typer.testing import CliRunner

    from jetflow_bench.cli import _register_commands, app

    _register_commands()
    args = ["bench", "drafter", "--target", target.name, "--drafter", f"dflash={checkpoints['dflash']}",
            "--drafter", f"jetflow[refine_passes=1]={checkpoints['jetflow']}", "--budgets", "4,8",
            "--max-new-tokens", "4", "--device", "cpu", "--data-dir", str(benchmark_data_dir()), "--format", "json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout.strip().splitlines()[-1])
    assert [(r["drafter"], r["budget"]) for r in rows] == [
        ("dflash", 4), ("dflash", 8), ("jetflow[refine_passes=1]", 4), ("jetflow[refine_passes=1]", 8)]
    assert all(r["draft_ms"] > 0 and 0 <= r["non_forward_share"] <= 1 for r in rows)
    uneven = CliRunner().invoke(app, [*args[:-2], "--prompts", "3", "--batch-size", "2"])
    assert isinstance(uneven.exception, JfbenchError)  # `main` prints it as one line, exit code 2
    assert "--prompts 3 is not a multiple of --batch-size 2" in str(uneven.exception)
