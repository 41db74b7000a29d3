"""`--executor ray` on a local Ray cluster of 2 logical CPUs: the same numbers as the local executor,
a worker killed mid-group, resume, and the one-line refusals."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.report.loading import INTERLEAVED
from jetflow_bench.sweep.grid import CELL_KEYS, DrafterSpec
from tests.helpers.cli import jfbench
from tests.helpers.data_dirs import benchmark_data_dir
from tests.helpers.random_models import save_random_model
from tests.helpers.ray_hooks import ARMED, kill_once_mid_group

DATA = benchmark_data_dir()
ROOT = Path(__file__).resolve().parents[2]
COMPARED = ["output_ids", "new_tokens", "steps", "drafted", "accepted", "tau", "lossless"]


def micro_grid(target: Path, out: Path, *extra: str) -> list[str]:
    """2 suites x 2 drafter arms (+ the AR baseline): 2 pairing groups of 3 cells, 2 prompts each."""
    return ["sweep", "--target", str(target), "--out", str(out), "--drafters", "ngram,ngram[max_ngram=2]",
            "--suites", "gsm8k,math500", "--budgets", "4", "--batch-sizes", "1", "--repeats", "1", "--limit", "2",
            "--max-new-tokens", "10", "--data-dir", str(DATA), "--threads", "1", "--no-progress", *extra]


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    return save_random_model(tmp_path_factory.mktemp("target") / "rand")


def ran(*args: str | Path) -> str:
    """Run jfbench, assert it succeeded, return its stderr."""
    code, _, err = jfbench(*args)
    assert code == 0, err
    return err


@pytest.fixture(scope="module")
def local_run(target, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs") / "local"
    ran(*micro_grid(target, out))
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """ray.init(num_cpus=2): two tasks at a time, each 1 logical CPU (a CPU device at --threads 1)."""
    ray = pytest.importorskip("ray")
    armed = tmp_path_factory.mktemp("hook") / "armed"
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING,
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), ARMED: str(armed)},
                          "worker_process_setup_hook": kill_once_mid_group})
    yield SimpleNamespace(armed=armed)
    ray.shutdown()


def requests(run: Path) -> pd.DataFrame:
    keys = [*CELL_KEYS, "request"]
    frame = pd.read_parquet(run / "requests.parquet").sort_values(keys).set_index(keys)[COMPARED]
    return frame.assign(output_ids=frame["output_ids"].map(list))


def assert_same_numbers(run: Path, local: Path) -> None:
    ours, theirs = requests(run), requests(local)
    assert len(ours) == 12 and ours["accepted"].sum() > 0  # 6 cells x 2 prompts; the drafts were accepted
    pd.testing.assert_frame_equal(ours, theirs)
    keys = [*CELL_KEYS]
    summary = [pd.read_parquet(r / "summary.parquet").sort_values(keys).set_index(keys)["tau"] for r in (run, local)]
    pd.testing.assert_series_equal(*summary)


@pytest.mark.slow  # ~1 min: a Ray cluster starts, workers import torch
def test_two_workers_give_the_local_executors_numbers_with_each_cells_worker_recorded(
    cluster, target, local_run, tmp_path,
):
    out = tmp_path / "ray"
    assert "6 cell(s) run, 0 already done" in ran(*micro_grid(target, out, "--executor", "ray"))
    assert_same_numbers(out, local_run)
    manifest = json.loads((out / "manifest.json").read_text())
    workers = manifest["workers"]
    assert len(workers) == 2  # the two groups ran at once, in two processes
    assert sorted(c for w in workers for c in w["cells"]) == sorted(p.stem for p in (out / "cells").glob("*.json"))
    assert all(w["versions"]["torch"] and w["device"] and w["host"] for w in workers)
    record = json.loads((out / "cells" / "math500__ngram__default__B4__bs1__r0.json").read_text())
    assert record["worker"]["pid"] in {w["pid"] for w in workers if record["cell_id"] in w["cells"]}
    assert record["pairing"] == INTERLEAVED
    rows = pd.read_parquet(out / "requests.parquet")
    assert rows[["base_decode_s", "aa_decode_s"]].notna().all().all()  # the A/A copy was timed in each round
    ar = rows[rows["drafter"] == "ar"][["suite", "request", "decode_s"]].rename(columns={"decode_s": "ar_decode_s"})
    arms = rows[rows["drafter"] != "ar"].merge(ar, on=["suite", "request"], validate="many_to_one")
    # each arm divides by the AR decode of its own round, in its worker: the AR cell's own time
    assert len(arms) == 8 and (arms["base_decode_s"] == arms["ar_decode_s"]).all()
    ran("show", out)
    ran("check", out, "--baseline", local_run)


@pytest.mark.slow
def test_a_worker_killed_mid_group_is_retried_and_the_run_resumes(cluster, target, local_run, tmp_path):
    out = tmp_path / "ray"
    cluster.armed.touch()
    ran(*micro_grid(target, out, "--executor", "ray"))
    assert not cluster.armed.exists(), "no worker was killed"
    assert_same_numbers(out, local_run)
    assert "0 cell(s) run, 6 already done" in ran(*micro_grid(target, out, "--executor", "ray"))
    for path in (out / "cells").glob("math500__ngram__*"):  # an interrupted run: the group's AR cell finished
        path.unlink()
    assert "2 cell(s) run, 4 already done" in ran(*micro_grid(target, out, "--executor", "ray"))
    assert_same_numbers(out, local_run)


@pytest.mark.slow
def test_a_local_run_cut_inside_a_group_resumes_on_ray_from_its_journal(cluster, target, local_run, tmp_path, monkeypatch):
    from jetflow_bench.sweep import driver

    out, real, calls = tmp_path / "run", driver.decode_batch, []

    def cut_at_the_second_round(*args, **kwargs):  # a group's round: AR, 2 arms, the A/A copy
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(driver, "decode_batch", cut_at_the_second_round)
        assert jfbench(*micro_grid(target, out))[0] == 130
    assert len(list((out / "partial").iterdir())) == 3 and not list((out / "cells").glob("*.json"))
    ran(*micro_grid(target, out, "--executor", "ray"))
    assert not (out / "partial").exists()  # the journals the worker was sent go once their cells are stored
    sessions = [s["session"] for s in json.loads((out / "manifest.json").read_text())["sessions"]]
    record = json.loads((out / "cells" / "gsm8k__ngram__default__B4__bs1__r0.json").read_text())
    assert record["resumed"] == {sessions[0]: 1} and record["session"] == sessions[1]  # round 0 was not decoded again
    assert_same_numbers(out, local_run)


@pytest.mark.slow
def test_a_group_lost_for_good_is_named_the_others_stored_and_the_rerun_completes(cluster, target, local_run, tmp_path):
    out = tmp_path / "ray"
    cluster.armed.touch()
    code, _, err = jfbench(*micro_grid(target, out, "--executor", "ray", "--ray-max-retries", "0"))
    assert code == 2, err
    assert "bs=1: its worker was lost 1 time(s) (WorkerCrashedError); the groups that finished are stored" in err
    assert len(list((out / "cells").glob("*.json"))) == 3  # the other group's cells, and none of the lost one's
    assert "3 cell(s) run, 3 already done" in ran(*micro_grid(target, out, "--executor", "ray"))
    assert_same_numbers(out, local_run)


@pytest.mark.slow
def test_a_task_the_cluster_cannot_place_is_refused_in_one_line(cluster, target, tmp_path):
    code, _, err = jfbench(*micro_grid(target, tmp_path / "ray", "--executor", "ray", "--ray-gpus-per-task", "1"))
    assert code == 2 and err.count("\n") == 1
    assert "asks for 1 GPU(s) but the Ray cluster has 0: lower --ray-gpus-per-task" in err


def test_without_ray_the_executor_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    code, out, err = jfbench(*micro_grid(tmp_path, tmp_path / "run", "--executor", "ray"))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert 'pip install -e ".[ray]"' in err
    assert not (tmp_path / "run").exists()


def test_an_unknown_executor_is_one_line(tmp_path):
    code, _, err = jfbench(*micro_grid(tmp_path, tmp_path / "run", "--executor", "dask"))
    assert code == 2 and "--executor 'dask': use local or ray" in err and err.count("\n") == 1


def test_a_path_a_worker_cannot_see_is_named_before_anything_loads(tmp_path):
    from jetflow_bench.sweep.ray_executor import _check_paths

    head = tmp_path / "heads" / "jf"
    config = SimpleNamespace(target=str(tmp_path), drafters=(DrafterSpec("jetflow", checkpoint=str(head)),))
    with pytest.raises(JfbenchError, match=rf"cannot see the head of jetflow \(default\) at {head}: put it on storage"):
        _check_paths(SimpleNamespace(config=config, data_dir=None))


def test_no_cluster_at_the_address_is_one_line_naming_how_to_get_one():
    from jetflow_bench.sweep.ray_executor import _connected

    class NoCluster:
        def is_initialized(self) -> bool:
            return False

        def init(self, **kwargs) -> None:
            raise ConnectionError("Could not find any running Ray instance.\nPlease specify ...")

    with pytest.raises(JfbenchError) as err, _connected(NoCluster(), "auto"):
        pass
    assert str(err.value) == ("--ray-address auto: no Ray cluster there (Could not find any running Ray instance.): "
                              "start one with `ray start --head` (docs/ray.md), or pass --ray-address local")
