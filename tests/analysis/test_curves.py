"""`jfbench curves`: heads' held-out curves read back from their records (`jetflow_bench.report.curves`)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd


def _head(folder: Path, curve: list[tuple[int, float]], stop: str = "plateau", prompts: int = 2400) -> Path:
    folder.mkdir(parents=True)
    training = {"recipe": {"drafter": "dflash", "prompts": prompts, "decay": 7.0, "seed": 0}, "sequences": prompts - 48,
                "steps_done": curve[-1][0], "stop_reason": stop,
                "heldout": [{"step": s, "agreement": [a / 3, 0.1], "accept_len": a} for s, a in curve]}
    (folder / "config.json").write_text(json.dumps({"drafter": "dflash", "training": training}))
    return folder


def test_curves_summarise_each_head_and_list_every_evaluation(tmp_path, cli):
    big = _head(tmp_path / "2400" / "dflash" / "seed-0", [(50, 0.5), (100, 1.2), (150, 1.1)])
    small = _head(tmp_path / "256" / "dflash" / "seed-0", [(50, 0.6), (100, 0.7)], stop="time limit", prompts=256)
    code, text, err = cli("curves", str(big), str(small), "--format", "csv")
    assert code == 0, err
    summary = pd.read_csv(io.StringIO(text)).set_index("head")
    assert list(summary.index) == ["2400/dflash/seed-0", "256/dflash/seed-0"]  # told apart by their paths
    row = summary.iloc[0]
    assert (row["last"], row["best"], row["best_step"], row["stop_reason"]) == (1.1, 1.2, 100, "plateau")
    assert summary.iloc[1]["prompts"] == 256 and summary.iloc[1]["stop_reason"] == "time limit"
    code, text, err = cli("curves", str(big), "--every", "--format", "csv")
    every = pd.read_csv(io.StringIO(text))
    assert every["step"].tolist() == [50, 100, 150] and every["heldout_top1"].round(3).tolist() == [0.167, 0.4, 0.367]


def test_plateau_step_is_where_the_stopping_rule_first_finds_the_curve_flat(tmp_path, cli):
    flat = _head(tmp_path / "flat", [(s, 1.0) for s in range(50, 701, 50)], stop="steps")
    rising = _head(tmp_path / "rising", [(s, s / 100) for s in range(50, 701, 50)], stop="steps")
    code, text, err = cli("curves", str(flat), str(rising), "--format", "csv")
    summary = pd.read_csv(io.StringIO(text)).set_index("head")
    # 4 evaluations in the last 2/5 of the steps (from step 400), at three evaluations running (400, 450, 500)
    assert code == 0 and summary.loc["flat", "plateau_step"] == 500, err
    assert pd.isna(summary.loc["rising", "plateau_step"])
    assert "plateau_step" in cli("curves", str(flat))[1]


def test_curves_plot_and_published_records(tmp_path, cli):
    head = _head(tmp_path / "h", [(50, 0.5), (100, 1.0)])
    record = tmp_path / "heads" / "jetflow-s1.config.json"  # a published heads/ file
    record.parent.mkdir()
    record.write_text((head / "config.json").read_text())
    code, text, err = cli("curves", str(head), str(record), "--plot", str(tmp_path / "c.png"))
    assert code == 0 and "jetflow-s1" in text, err
    assert set(pd.read_csv(io.StringIO(cli("curves", str(head), str(record), "--format", "csv")[1]))["head"]) == {"h", "jetflow-s1"}
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_bad_inputs_are_one_line(tmp_path, cli):
    empty = tmp_path / "empty"
    empty.mkdir()
    flat = _head(tmp_path / "flat", [(50, 0.5)])
    data = json.loads((flat / "config.json").read_text())
    data["training"]["heldout"] = []
    (flat / "config.json").write_text(json.dumps(data))
    a = _head(tmp_path / "a" / "x", [(1, 1.0)])
    for args, message in ((["curves", str(empty)], "no head record here"),
                          (["curves", str(flat)], "records no held-out curve"),
                          (["curves", str(a), str(a / "config.json")], "named twice"),
                          (["curves", str(a), "--plot", str(tmp_path / "c.txt")], ".png or .svg")):
        code, text, err = cli(*args)
        assert code == 2 and text == "" and message in err and err.strip().count("\n") == 0, (args, err)


def test_a_head_in_training_shows_its_checkpoints_curve(tmp_path, cli):
    import os

    import torch

    head = _head(tmp_path / "h", [(50, 0.5)], stop="time limit")  # the record an earlier stop left
    (head / ".partial").mkdir()
    torch.save({"step": 150, "heldout": [{"step": s, "agreement": [0.3], "accept_len": a}
                                         for s, a in ((50, 0.5), (100, 0.9), (150, 1.4))]}, head / ".partial" / "state.pt")
    os.utime(head / "config.json", (1, 1))  # the checkpoint is newer: the run went on
    code, text, err = cli("curves", str(head), "--format", "csv")
    row = pd.read_csv(io.StringIO(text)).iloc[0]
    assert code == 0 and (row["stop_reason"], row["steps_done"], row["last"]) == ("in training", 150, 1.4), err
    assert row["prompts"] == 2400  # the recipe from the earlier record
    os.utime(head / ".partial" / "state.pt", (0, 0))  # the record is newer: a stop after the checkpoint
    row = pd.read_csv(io.StringIO(cli("curves", str(head), "--format", "csv")[1])).iloc[0]
    assert (row["stop_reason"], row["steps_done"]) == ("time limit", 50)
