"""Running a whole grid: load once, run every unfinished cell, store it, rebuild the tables.

Per cell: torch seed, untimed warm-up, timed decode of every prompt batch (`runner.run_cell`),
each batch journaled as it finishes (`journal.CellJournal`), then — outside the timed region —
losslessness against the paired AR cell, answer checks, and an atomic write of the cell
(`store.RunStore`). Finished cells of an earlier, interrupted run of the same config are skipped,
and their AR outputs still serve as references; a cell it left half-done decodes only the batches
its journal lacks.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from drafters import Drafter
from jetflow_bench.arms import arm_label
from jetflow_bench.budget_policy import AUTO_COLUMN
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.errors import JfbenchError
from jetflow_bench.runtime import cpu_numerics
from jetflow_bench.sweep.efficiency import engine_efficiency
from jetflow_bench.sweep.engines import ENGINES, Engine
from jetflow_bench.sweep.grid import (
    AR_ARM,
    Cell,
    DrafterSpec,
    SweepConfig,
    cell_hash,
    cells,
    config_dict,
    config_hash,
    sampling_for,
    settings_hash,
    spec_for,
    stable_hash,
)
from jetflow_bench.sweep.journal import CellJournal
from jetflow_bench.sweep.lossless import Verdict, judge, sampled_verdict
from jetflow_bench.sweep.memory import check_memory
from jetflow_bench.sweep.progress import SweepProgress
from jetflow_bench.sweep.runner import Prompt, run_cell
from jetflow_bench.sweep.store import HOLDER, LOCK, Derived, RunStore, now_iso
from jetflow_bench.sweep.tables import cell_frames, optional_frames
from suites import Record, Request, Suite, get_suite, sandbox

REBUILD_RATIO = 10  # run time between refreshes of the combined tables >= 10 x the last refresh's cost
VERSIONED = ("jetflow-bench", "torch", "transformers", "tokenizers", "numpy", "pandas", "pyarrow")


@dataclass
class Workload:
    """One suite's prompts, tokenised once and shared by every cell of the suite."""

    suite: Suite
    records: dict[str, Record]
    requests: list[Request]
    prompts: list[Prompt]
    source: dict[str, Any]  # where the data came from, for the manifest


@dataclass
class SweepOutcome:
    summary: pd.DataFrame
    ran: int  # cells run by this invocation
    skipped: int  # cells already finished by an earlier one
    unexcused: int  # requests with an unexcused divergence, over the whole run
    notes: list[str] = field(default_factory=list)


def load_workload(name: str, engine: Engine, config: SweepConfig, data_dir: Path | None) -> Workload:
    suite = get_suite(name)
    loaded = suite.load(data_dir, limit=config.limit, sample_seed=config.sample_seed)
    if not len(loaded):
        raise JfbenchError(f"suite {name!r} has no records in {loaded.source}: check --data-dir")
    tokenizer = engine.tokenizer
    requests = suite.requests(loaded, tokenizer, config.max_new_tokens)
    eos = frozenset(engine.eos_token_ids)
    stops: dict[tuple[int, tuple[str, ...]], StopRule] = {}
    prompts = []
    for i, request in enumerate(requests):
        key = (request.max_new_tokens, request.stop)
        stop = stops.setdefault(key, StopRule(request.max_new_tokens, eos, request.stop, tokenizer.decode))
        prompts.append(Prompt(i, engine.encode(request.prompt), stop))
    source = {"kind": loaded.kind, "source": loaded.source, "total": loaded.total, "skipped": loaded.skipped,
              "selected": len(loaded), "prompts_hash": stable_hash([(r.prompt, r.max_new_tokens, r.stop) for r in requests])}
    return Workload(suite, {r.id: r for r in loaded.records}, requests, prompts, source)


def environment(engine: Engine, config: SweepConfig) -> dict[str, Any]:
    """Versions, device, threads, CPU kernels and git commit: what a reader needs to trust (or redo) a number."""
    versions = {"python": sys.version.split()[0]}
    for package in VERSIONED:
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            versions[package] = None
    info = engine.describe()
    return {
        "versions": versions, "torch_threads": torch.get_num_threads(), "cpu_numerics": cpu_numerics(),
        "device_info": info,
        "device": f"{info.get('device_name', info.get('device'))} ({info.get('device')}, "
                  f"{torch.get_num_threads()} threads)",
        **_git(), "host": socket.gethostname(), "user": getpass.getuser(),
        "seeds": {"seed": config.seed, "sample_seed": config.sample_seed},
    }


def _git() -> dict[str, Any]:
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        status = subprocess.run(["git", "-C", root, "status", "--porcelain"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return {"git_commit": None, "git_dirty": None}
    if commit.returncode:
        return {"git_commit": None, "git_dirty": None}
    return {"git_commit": commit.stdout.strip(), "git_dirty": bool(status.stdout.strip())}


def run_sweep(
    config: SweepConfig,
    out: Path,
    *,
    command: list[str],
    data_dir: Path | None = None,
    force: bool = False,
    kind: str = "sweep",
    show_progress: bool = True,
    derived: Derived | None = None,
    max_memory: int | None = None,
    engine_options: Any = None,
) -> SweepOutcome:
    """Run (or finish) the grid of ``config`` in the run folder ``out``.

    ``derived`` adds tables computed from the requests rows (the ablation), rebuilt with the rest.
    ``max_memory`` (bytes) replaces the available memory the grid's KV caches are checked against.
    ``engine_options`` go to the engine factory (e.g. where a vLLM server runs; not hashed). The
    engine is closed (its servers stopped) however the run ends. Every check (target, suites,
    data, memory, every drafter built once) passes before the manifest and the first cell are
    written.
    """
    chash, shash = config_hash(config), settings_hash(config)
    store = RunStore(out)
    with _removed_if_left_empty(out), store.locked(), contextlib.ExitStack() as stack:
        previous = store.prepare(chash, force, shash)
        engine = ENGINES.get(config.engine)(config, out, engine_options)
        stack.callback(engine.close)
        workloads = {name: load_workload(name, engine, config, data_dir) for name in config.suites}
        check_memory(engine, config, {name: w.prompts for name, w in workloads.items()}, max_memory)
        grid = list(cells(config))
        hashes = {c.cell_id: cell_hash(config, c, spec_for(config, c)) for c in grid}
        finished = store.finished(hashes, {c.cell_id: c.label() for c in grid})
        manifest = _manifest(previous, config, chash, shash, kind, command, engine, workloads, data_dir, len(grid))
        manifest["sessions"][-1]["cells_done_before"] = len(finished)
        manifest["engine_efficiency"] = engine_efficiency(engine)  # this session's engine against its roofline
        _record_adopted(manifest, store, finished)
        todo = [c for c in grid if c.cell_id not in finished]
        sweep = _CellLoop(engine, store, config, manifest, workloads)
        for cell in todo:  # a missing or mismatched head fails now, not after the AR cells ran
            sweep.drafter(cell)
        if any(w.suite.executes_code and w.suite.scored for w in workloads.values()):
            manifest["code_sandbox"] = sandbox.isolation()  # says whether generated code had a network
            sandbox.announce()
        store.write_manifest(manifest)
        rebuilt_at, rebuild_s = 0.0, 0.0
        with SweepProgress(len(grid), len(finished), show_progress) as progress:
            for cell in todo:
                progress.start_cell(cell, len(workloads[cell.suite].prompts))
                sweep.run(cell, hashes[cell.cell_id], progress)
                finished.add(cell.cell_id)
                # The combined tables are a convenience (cells/ is the record): refresh them after a
                # cell unless that would spend over 1/REBUILD_RATIO of the run rebuilding big tables.
                if time.perf_counter() - rebuilt_at >= REBUILD_RATIO * rebuild_s:
                    started = time.perf_counter()
                    store.rebuild([c.cell_id for c in grid if c.cell_id in finished], config.n_boot, config.seed, derived)
                    rebuilt_at, rebuild_s = time.perf_counter(), time.perf_counter() - started
                progress.end_cell()
        summary = store.rebuild([c.cell_id for c in grid], config.n_boot, config.seed, derived)
        manifest["sessions"][-1]["finished"] = manifest["finished"] = now_iso()
        store.write_manifest(manifest)
    unexcused = int(summary["lossless_unexcused"].sum())
    return SweepOutcome(summary, len(todo), len(grid) - len(todo), unexcused, fill_notes(summary))


@contextlib.contextmanager
def _removed_if_left_empty(folder: Path) -> Iterator[None]:
    """Remove ``folder`` on the way out if this run created it and wrote nothing (a refused start)."""
    created = not folder.exists()
    try:
        yield
    finally:
        left = {p.name for p in folder.iterdir()} if created and folder.is_dir() else {"kept"}
        if left <= {LOCK, HOLDER}:  # the released run lock's own file is all there is
            for name in left:
                (folder / name).unlink()
            folder.rmdir()


def _manifest(
    previous: dict[str, Any] | None, config: SweepConfig, chash: str, shash: str, kind: str, command: list[str],
    engine: Engine, workloads: dict[str, Workload], data_dir: Path | None, n_cells: int,
) -> dict[str, Any]:  # fmt: skip
    """The run's manifest with a new session appended; a resumed run must see the same prompts.

    The data folder is not part of the config hash (moving it changes nothing), so the prompts
    themselves are fingerprinted: resuming on other prompts would pair different workloads.
    A resume under other package versions or another git commit is allowed, with a warning.
    """
    env = environment(engine, config)
    suites = {n: w.source for n, w in workloads.items()}
    if previous is not None:
        for name, source in suites.items():
            before = previous.get("suites", {}).get(name, {}).get("prompts_hash")
            if before is not None and before != source["prompts_hash"]:  # None: a suite new to the grid
                raise JfbenchError(
                    f"suite {name!r} now yields other prompts than when this run started (data changed?): "
                    "restore the data, or pass --force to start the run again"
                )
        drift = [k for k in ("git_commit", "versions") if previous.get(k) != env[k]]
        if drift:
            print(f"warning: resuming under another {' and '.join(drift)} than the finished cells used; "
                  "see the manifest's sessions", file=sys.stderr)
    started = now_iso()
    manifest = previous or {"run_id": f"{started[:10]}-{chash[:8]}-{uuid.uuid4().hex[:6]}", "kind": kind,
                            "started": started, "sessions": []}
    manifest.update({
        "command": " ".join(command), "config": config_dict(config), "config_hash": chash, "settings_hash": shash,
        **env,
        "data_dir": str(data_dir) if data_dir else None, "suites": suites, "n_cells": n_cells, "finished": None,
    })
    manifest["sessions"].append({
        "session": uuid.uuid4().hex[:8], "pid": os.getpid(), "host": socket.gethostname(), "command": command,
        "started": started, "finished": None,
        "git_commit": env["git_commit"], "git_dirty": env["git_dirty"], "versions": env["versions"],
    })
    return manifest


def _record_adopted(manifest: dict[str, Any], store: RunStore, finished: set[str]) -> None:
    """Name in the manifest the finished cells no session of this folder recorded, with their commands.

    Arms timed in parallel run in copies of the folder and their cells are copied back
    (docs/robustness.md); without this the manifest would show only the commands of its own
    sessions. Cells recorded before records named their session cannot be told apart and are not listed.
    """
    own = {s.get("session") for s in manifest["sessions"]}
    adopted = {}
    for cell_id in sorted(finished):
        record = store.cell_record(cell_id)
        if record.get("session") is not None and record["session"] not in own:
            adopted[cell_id] = {k: record.get(k) for k in ("run_id", "session", "command")}
    new = adopted.keys() - manifest.pop("adopted_cells", {}).keys()  # a resumed manifest keeps its earlier list
    if adopted:
        manifest["adopted_cells"] = adopted
    if new:
        print(f"note: {len(new)} finished cell(s) were recorded by a sweep in another folder and copied in; "
              "the manifest's adopted_cells keeps each one's command", file=sys.stderr)


class _CellLoop:
    """Runs single cells with shared state: engine, drafters (built once), prompts, the store."""

    def __init__(
        self, engine: Engine, store: RunStore, config: SweepConfig, manifest: dict[str, Any],
        workloads: dict[str, Workload],
    ) -> None:
        self.engine, self.store, self.config, self.workloads = engine, store, config, workloads
        self.run_id = manifest["run_id"]
        self.session = {"session": manifest["sessions"][-1]["session"], "command": manifest["command"]}  # in each record
        self.drafters: dict[DrafterSpec, Drafter] = {}

    def drafter(self, cell: Cell) -> Drafter | None:
        if cell.is_baseline:
            return None
        spec = spec_for(self.config, cell)
        if spec not in self.drafters:
            checkpoint = Path(spec.checkpoint) if spec.checkpoint else None
            self.drafters[spec] = self.engine.build_drafter(spec, checkpoint)
        return self.drafters[spec]

    def run(self, cell: Cell, chash: str, progress: SweepProgress) -> None:
        """Decode (timed), then judge losslessness and answers (untimed), then store the cell."""
        work, config = self.workloads[cell.suite], self.config
        torch.manual_seed(config.seed)
        journal = CellJournal(self.store.folder, cell.cell_id, chash, cell.label(), self.session["session"])
        run = run_cell(self.engine, cell, work.prompts, self.drafter(cell), config.warmup_tokens, progress.advance,
                       sampling=sampling_for(config, cell), journal=journal)
        if run.resumed:
            progress.note(f"note: {cell.label()}: {sum(run.resumed.values())} prompt batch(es) decoded by an earlier "
                          "session were reused; the cell's record names them under 'resumed'")
        ids = sorted(run.outputs)
        outputs = {i: run.outputs[i].output_tokens for i in ids}
        verdicts = self.verdicts(cell, work, outputs)
        texts = {i: self.engine.tokenizer.decode(outputs[i], skip_special_tokens=True) for i in ids}
        if work.suite.scored:
            items = [(work.records[work.requests[i].record_id], work.requests[i].cut(texts[i])) for i in ids]
            correct = dict(zip(ids, work.suite.check_many(items), strict=True))
        else:
            correct = dict.fromkeys(ids)
        labels = {i: (work.requests[i].record_id, work.requests[i].prompt, texts[i]) for i in ids}
        engine, baseline = self.engine.label(self.drafter(cell)), self.engine.baseline_arm(self.drafter(cell))
        steps, requests, row = cell_frames(self.run_id, cell, chash, engine, run, labels, verdicts, correct, baseline)
        resumed = {"resumed": run.resumed} if run.resumed else {}
        self.store.write_cell(cell.cell_id, steps, requests, {**row, **self.session, **resumed},
                              **optional_frames(cell, run))
        journal.clear()
        bad = [v for v in verdicts.values() if not v.lossless and not v.excused]
        if bad:
            progress.note(f"warning: {cell.label()}: {len(bad)} request(s) diverge from the AR baseline "
                          f"(first at token {bad[0].first_divergence}) and are not fp near-ties")

    def verdicts(self, cell: Cell, work: Workload, outputs: dict[int, list[int]]) -> dict[int, Verdict]:
        """Per request: identical to the paired AR cell's tokens, or an (excused?) divergence.

        At temperature > 0 losslessness is a property of the output distribution, which the test
        suite checks (`sampled_verdict`); per-request equality is not required.
        """
        if cell.is_baseline:
            return {i: Verdict(True, False, None, None) for i in outputs}
        reference = self.store.cell_requests(cell.baseline.cell_id).set_index("request")["output_ids"]
        if cell.temperature:
            return {i: sampled_verdict(list(reference[i]), out) for i, out in outputs.items()}
        return {
            i: judge(work.prompts[i].tokens, list(reference[i]), out, self.engine.next_token_logits, self.config.tie_eps)
            for i, out in outputs.items()
        }


def fill_notes(summary: pd.DataFrame) -> list[str]:
    """A note per drafter arm and budget whose trees never reach B − 1 drafted nodes.

    The budget is not shrunk to what the drafter can fill: its cells keep B, and `budget_fill`
    (mean drafted / (B − 1)) and `drafted_max` in the summary show how much of it was used.
    """
    arms = summary[(summary["drafter"] != AR_ARM) & summary["drafted_max"].notna()]
    notes = []
    for (drafter, variant, budget), group in arms.groupby(["drafter", "variant", "budget"]):
        most = int(group["drafted_max"].max())
        if budget != AUTO_COLUMN and most < budget - 1:
            arm = arm_label(drafter, variant)
            notes.append(f"note: {arm} drafted at most {most} of {budget - 1} nodes at budget {budget} "
                         f"(mean {group['drafted_mean'].mean():.1f}); the budget is reported as given, not shrunk")
    return notes
