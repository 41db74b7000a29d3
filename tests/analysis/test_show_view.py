"""`jfbench show`: the compact default view fits 100 columns, --wide / --columns show the rest whole.

The bugs: the default table needed ~230 columns, so a terminal showed every cell as "…"; a column
with no explanation anywhere; an unknown --columns name ignored or a traceback.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from jetflow_bench.cli.output import print_table, rich_table
from jetflow_bench.cli.summary_view import COLUMNS, COMPACT, LEGEND
from tests.helpers.fixtures_runs import write_fixture_run


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fixture_run(tmp_path_factory.mktemp("show") / "run", suites=("livecodebench", "gsm8k"),
                             variants=("default", "head=bidirectional"))


def _width(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_default_view_fits_100_columns_with_a_one_line_legend(run: Path, cli) -> None:
    code, out, err = cli("show", str(run))
    assert code == 0, err
    summary = out.split("ablation")[0]
    assert _width(summary) <= 100 and "…" not in out
    assert LEGEND in out.splitlines() and len(LEGEND) <= 100
    header = next(line for line in out.splitlines() if "suite" in line and "arm" in line)
    for column in COMPACT:
        assert next(c.header for c in COLUMNS if c.name == column) in header
    assert "jetflow[head=bidirectional]" in out and "livecodebench" in out  # whole, not wrapped or cut


def test_wide_shows_every_column_and_columns_picks(run: Path, cli) -> None:
    code, out, _ = cli("show", str(run), "--wide")
    header = next(line for line in out.splitlines() if "suite" in line and "arm" in line)
    assert code == 0 and all(c.header in header for c in COLUMNS) and "…" not in out
    code, out, _ = cli("show", str(run), "--columns", "tok_s,passes")
    header = next(line for line in out.splitlines() if "suite" in line and "arm" in line)
    assert code == 0 and header.split() == ["suite", "arm", "tok/s", "passes"]


def test_unknown_column_is_one_line_naming_the_choices(run: Path, cli) -> None:
    code, _, err = cli("show", str(run), "--columns", "tau,speed")
    assert code == 2 and "'speed'" in err and "tok_s" in err and len(err.strip().splitlines()) == 1


def test_every_column_is_documented_in_help_and_methodology(cli) -> None:
    code, out, _ = cli("show", "--help")
    methodology = (Path(__file__).parents[2] / "docs" / "methodology.md").read_text()
    for column in COLUMNS:
        assert f"\n    {column.name} " in out, column.name
        assert f"| `{column.name}` | {column.header} |" in methodology, column.name


def test_a_table_wider_than_the_terminal_keeps_its_values_whole(tmp_path: Path) -> None:
    rows = [{"arm": "jetflow-refine[refine_passes=2]", **{f"c{i}": "1.00 [0.95, 1.05]" for i in range(8)}}]
    path = tmp_path / "out.txt"
    with path.open("w") as file:
        print_table(Console(file=file, width=80, force_terminal=True, no_color=True), rich_table(rows, left=("arm",)))
    text = path.read_text()
    assert "…" not in text and text.count("1.00 [0.95, 1.05]") == 8


def test_a_run_recorded_before_in_session_pairing_shows_no_speedup_and_says_why(tmp_path: Path, cli) -> None:
    """The bug: an arm was paired with a plain-decoding cell timed in another session, under another
    load, and its ratio was printed as a speed-up. A folder recorded before in-session pairing stays
    readable: τ as before, no speed-up anywhere, and a line that says why."""
    old = write_fixture_run(tmp_path / "old", drafters=("ngram",), budgets=(16,), batch_sizes=(1,), interleaved=False)
    code, out, err = cli("show", str(old))
    assert code == 0, err
    ngram = next(line for line in out.splitlines() if " ngram " in line)
    assert "– unpaired" in ngram and "1.4" not in ngram.split("–")[1]
    assert "– unpaired: no speed-up: its baseline was not timed beside it in its session" in out
    assert "noise floor" not in out
    code, out, _ = cli("show", str(old), "--format", "csv")
    frame = pd.read_csv(io.StringIO(out))
    assert frame.loc[frame["drafter"] == "ngram", "speedup_decode_micro"].isna().all() and frame["tau"].notna().all()


def test_a_head_trained_under_the_old_jetflow_default_is_labelled(run: Path, tmp_path: Path, cli) -> None:
    """A jetflow head whose recorded layout is unset trained packed (the default before issue 52):
    `show` and the report say so; a head recorded with a layout gets no label."""
    from jetflow_bench.report.loading import load_run
    from jetflow_bench.report.tables import manifest_items

    folder = Path(shutil.copytree(run, tmp_path / "run"))
    heads = {}
    for name, layout in (("old", None), ("new", "mask")):
        heads[name] = tmp_path / name
        heads[name].mkdir()
        record = {"drafter": "jetflow", "training": {"config": {"layout": layout, "head": "causal"}}}
        (heads[name] / "config.json").write_text(json.dumps(record))
    manifest = json.loads((folder / "manifest.json").read_text())
    drafters = [{"name": "jetflow", "variant": "default", "checkpoint": str(heads["old"])},
                {"name": "jetflow", "variant": "head=bidirectional", "checkpoint": str(heads["new"])}]
    (folder / "manifest.json").write_text(json.dumps({**manifest, "config": {**manifest.get("config", {}), "drafters": drafters}}))
    code, out, err = cli("show", str(folder))
    assert code == 0, err
    assert "jetflow: head trained under the old jetflow recipe (packed layout)" in out
    assert "jetflow[head=bidirectional]: head" not in out
    items = dict(manifest_items(load_run(folder)))
    assert json.loads(items["heads under an old recipe"]) == {"jetflow": "old jetflow recipe (packed layout)"}


def test_an_interleaved_run_shows_its_noise_floor_and_marks_speedups_within_it(run: Path, tmp_path: Path, cli) -> None:
    code, out, err = cli("show", str(run))
    assert code == 0, err
    assert "noise floor at batch 1: A/A 1.00× [" in out and "noise floor at batch 4: A/A" in out
    assert "1 repeat(s), 1 session(s)" in out and "unpaired" not in out
    folder = Path(shutil.copytree(run, tmp_path / "run"))
    summary = pd.read_parquet(folder / "summary.parquet")
    ngram = summary["drafter"] == "ngram"
    summary["speedup_distinct"] = ~ngram  # as if only ngram's CI overlapped the A/A band
    summary.to_parquet(folder / "summary.parquet", index=False)
    code, out, _ = cli("show", str(folder))
    rows = [line for line in out.splitlines() if " ngram " in line]
    assert rows and all("]~" in line for line in rows)
    assert not any("]~" in line for line in out.splitlines() if " jetflow " in line)
    assert "~: its CI overlaps the A/A noise floor: not distinguishable from 1 here" in out
