"""`--executor ray`: a sweep's pairing groups as Ray tasks on a cluster, stored in one run folder.

Each task runs one pairing group (`jetflow_bench.sweep.groups`: the AR baselines and arms of one
suite × batch size × temperature, every repeat) in one worker process, so every speed-up it pairs
was timed on one device under one load. The worker runs the group with the sweep's own code
(`driver.run_group_in`, i.e. `GroupRunner.run_group`: rounds interleaving the AR baseline, the arms
and the A/A copy, with the paired timings per request) into a scratch folder of its own and returns
the unfinished cells' tables; the driver,
the one process holding the run folder's lock, stores them with the store's atomic writes (parts,
then the record). So a worker that dies mid-group leaves nothing in the run folder: Ray runs the
task again from the group's start (``max_retries``), groups already returned stay stored, and
re-running the command after an interruption skips them. Workers read the target, the heads and
the data from paths every node must see (checked first, on the worker); only a group's finished
AR tables and journaled batches (when an earlier session left them) and its results travel
through Ray's object store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.progress import SweepProgress
from jetflow_bench.core.runtime import set_threads
from jetflow_bench.sweep.driver import GroupJob, run_group_in
from jetflow_bench.sweep.grid import Cell
from jetflow_bench.sweep.groups import PairingGroup
from jetflow_bench.sweep.journal import CellJournal
from jetflow_bench.sweep.store import PARTIAL, CellParts, RunStore

RAY_EXTRA = 'pip install -e ".[ray]"'
WORKER_KEYS = ("host", "pid", "node", "device", "torch_threads", "versions", "git_commit", "git_dirty")


def require_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise JfbenchError(f"--executor ray needs Ray, an optional extra that is not installed: {RAY_EXTRA}") from None
    return ray


@dataclass(frozen=True)
class RayOptions:
    address: str = "auto"  # the cluster this node belongs to (or RAY_ADDRESS); "local": one started for the run
    gpus_per_task: float | None = None  # None: 1 on a CUDA device, else 0
    cpus_per_task: float | None = None  # None: 1 on a CUDA device, else the sweep's --threads
    max_retries: int = 3  # times a group whose worker died runs again


@dataclass
class GroupSeed:
    """What an earlier session left for a group, copied into the worker's scratch folder."""

    cells: dict[str, CellParts]  # finished AR cells that the group's unfinished arms are judged against
    journals: dict[str, dict[str, str]]  # unfinished cell id -> its journaled batches (file name -> text)


@dataclass
class GroupResult:
    worker: dict[str, Any]  # WORKER_KEYS of the process that ran the group
    cells: dict[str, CellParts]  # cell id -> its tables, in run order
    seconds: float


class RayExecutor:
    """Runs pairing groups as Ray tasks (`driver.GroupExecutor`); connected to the cluster while entered,
    so a missing cluster is said before the target loads."""

    def __init__(self, options: RayOptions) -> None:
        require_ray()  # before any model loads
        self.options = options
        self._connection = contextlib.ExitStack()

    def __enter__(self) -> RayExecutor:
        self._connection.enter_context(_connected(require_ray(), self.options.address))
        return self

    def __exit__(self, *exc: object) -> None:
        self._connection.close()

    def run(
        self, groups: list[PairingGroup], job: GroupJob, store: RunStore, manifest: dict[str, Any],
        stored: Callable[[Cell], None], progress: SweepProgress,
    ) -> None:
        ray = require_ray()
        task = ray.remote(_run_group).options(**self._resources(ray, job), max_retries=self.options.max_retries,
                                              runtime_env={"env_vars": {"OMP_NUM_THREADS": str(job.config.threads)}})
        shared = ray.put(job)
        pending = {task.remote(shared, g, _seed(store, g, job.todo)): g for g in groups}
        failures: list[BaseException] = []
        while pending:  # store each group as it comes back; a failed one does not stop the others
            [ready], _ = ray.wait(list(pending), num_returns=1)
            group = pending.pop(ready)
            try:
                result: GroupResult = ray.get(ready)
            except ray.exceptions.RayError as err:
                failures.append(_failure(ray, group, err, self.options.max_retries))
                continue
            cells, session = {c.cell_id: c for c in group.cells}, job.manifest["sessions"][-1]["session"]
            worker = {k: result.worker[k] for k in ("host", "pid", "device")}
            for cell_id, (steps, requests, record, optional) in result.cells.items():  # the AR cells first
                store.write_cell(cell_id, steps, requests, {**record, "worker": worker}, **optional)
                CellJournal(store.folder, cell_id, job.hashes[cell_id], cells[cell_id].label(), session).clear()
                stored(cells[cell_id])
            _add_worker(manifest, result.worker, list(result.cells))
            store.write_manifest(manifest)
            progress.cells_stored(len(result.cells), f"{group.label()}: {len(result.cells)} cell(s) on "
                                  f"{result.worker['host']} ({result.worker['device']}), {result.seconds:.1f} s")
        if failures:
            raise failures[0]

    def _resources(self, ray: Any, job: GroupJob) -> dict[str, float]:
        """The task's resources, refused at once when the whole cluster has fewer (Ray would wait forever)."""
        cuda = job.config.device.startswith("cuda")
        gpus = self.options.gpus_per_task if self.options.gpus_per_task is not None else float(cuda)
        cpus = self.options.cpus_per_task if self.options.cpus_per_task is not None else (1 if cuda else job.config.threads)
        have = ray.cluster_resources()
        for name, asked, flag in (("GPU", gpus, "--ray-gpus-per-task"), ("CPU", cpus, "--ray-cpus-per-task")):
            if asked > have.get(name, 0):
                raise JfbenchError(f"each group's task asks for {asked:g} {name}(s) but the Ray cluster has "
                                   f"{have.get(name, 0):g}: lower {flag} or add nodes")
        return {"num_gpus": gpus, "num_cpus": cpus}


@contextlib.contextmanager
def _connected(ray: Any, address: str) -> Iterator[None]:
    """Connected to the cluster for the run; a connection made by the caller (a test, a notebook) is kept."""
    if ray.is_initialized():
        yield
        return
    try:  # "local" starts a cluster of this machine even where RAY_ADDRESS names another
        ray.init(address=address, logging_level=logging.WARNING, **({"include_dashboard": False} if address == "local" else {}))
    except ConnectionError as err:
        raise JfbenchError(f"--ray-address {address}: no Ray cluster there ({str(err).splitlines()[0]}): start one "
                           "with `ray start --head` (docs/ray.md), or pass --ray-address local") from None
    try:
        yield
    finally:
        ray.shutdown()


def _seed(store: RunStore, group: PairingGroup, todo: frozenset[str]) -> GroupSeed:
    """What the group's unfinished cells resume from: the finished AR cells their arms are judged
    against and their journaled batches, as the local executor would find them in the run folder."""
    unfinished = [c for c in group.cells if c.cell_id in todo]
    baselines = {c.baseline.cell_id for c in unfinished if not c.is_baseline} - todo
    journals = {c.cell_id: {p.name: p.read_text() for p in sorted((store.folder / PARTIAL / c.cell_id).glob("batch-*.json"))}
                for c in unfinished}
    return GroupSeed({cell_id: store.cell_parts(cell_id) for cell_id in sorted(baselines)},
                     {cell_id: files for cell_id, files in journals.items() if files})


def _run_group(job: GroupJob, group: PairingGroup, seed: GroupSeed) -> GroupResult:
    """A task's body, on the worker: check the paths, run the group in a scratch folder, return its
    unfinished cells, the AR cells first."""
    import ray

    started = time.perf_counter()
    _check_paths(job)
    set_threads(job.config.threads)
    with tempfile.TemporaryDirectory(prefix="jfbench-group-") as scratch:
        folder = Path(scratch)
        seeded = RunStore(folder)
        for cell_id, (steps, requests, record, optional) in seed.cells.items():
            seeded.write_cell(cell_id, steps, requests, record, **optional)
        for cell_id, files in seed.journals.items():
            (folder / PARTIAL / cell_id).mkdir(parents=True)
            for name, text in files.items():
                (folder / PARTIAL / cell_id / name).write_text(text)
        env = run_group_in(folder, job, group)
        done = RunStore(folder)
        unfinished = sorted((c for c in group.cells if c.cell_id in job.todo), key=lambda c: not c.is_baseline)
        results = {c.cell_id: done.cell_parts(c.cell_id) for c in unfinished}
    worker = {**env, "pid": os.getpid(), "node": ray.get_runtime_context().get_node_id()}
    return GroupResult({k: worker.get(k) for k in WORKER_KEYS}, results, time.perf_counter() - started)


def _check_paths(job: GroupJob) -> None:
    """Every local path the sweep reads must exist on this node too, before anything loads."""
    config, host = job.config, socket.gethostname()
    paths = {"the target": config.target if Path(config.target).is_absolute() else None, "--data-dir": job.data_dir}
    paths |= {f"the head of {spec.name} ({spec.variant})": spec.checkpoint for spec in config.drafters}
    for what, path in paths.items():
        if path is not None and not Path(path).exists():
            raise JfbenchError(f"Ray worker {host} cannot see {what} at {path}: put it on storage every node "
                               "mounts at the same path (docs/ray.md)")


def _failure(ray: Any, group: PairingGroup, err: BaseException, retries: int) -> BaseException:
    """One line for what the user can act on; a worker's own bug keeps its traceback."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, JfbenchError):
        return JfbenchError(f"{group.label()}: {cause}")
    if isinstance(err, ray.exceptions.RayTaskError):
        return err
    return JfbenchError(f"{group.label()}: its worker was lost {retries + 1} time(s) ({type(err).__name__}); the "
                        "groups that finished are stored: re-run the same command to run the rest")


def _add_worker(manifest: dict[str, Any], worker: dict[str, Any], cell_ids: list[str]) -> None:
    """The manifest's ``workers``: each worker process once, with the cells it ran."""
    workers = manifest.setdefault("workers", [])
    for entry in workers:
        if (entry["host"], entry["pid"], entry["node"]) == (worker["host"], worker["pid"], worker["node"]):
            entry["cells"].extend(cell_ids)
            return
    workers.append({**worker, "cells": cell_ids})
