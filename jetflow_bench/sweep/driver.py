"""Running a whole grid: load once, run every unfinished cell, store it, rebuild the tables.

The grid is run by pairing group (`groups.pairing_groups`: suite × batch size × temperature) and,
inside a group, repeat by repeat in rounds: each round decodes one prompt batch for the AR
baseline, every pending arm and a second, A/A copy of the baseline, in an order rotated per repeat
(`round_order`), so that load drift hits both sides of every ratio alike. Each pending cell's batch
is journaled after its round (`journal.CellJournal`) with the timings of its round's baseline and
A/A copy (`DecodedBatch.paired`): a cell's speed-up divides only by a baseline timed beside it, in
its own session, and an arm added to a finished run gets a freshly timed baseline. When a repeat's
rounds are done, each pending cell is judged (losslessness against the AR cell, answer checks,
outside the timed region) and written atomically (`store.RunStore`), the AR cell first. Finished
cells of an earlier run of the same config are skipped, and their AR outputs still serve as
references; a cell it left half-done decodes only the batches its journal lacks. A cluster
executor (`GroupExecutor`, `--executor ray`) runs each group the same way in a worker
(`run_group_in`) and hands its cells back to be stored here. A group at a serving load level
(`load`) times whole serving runs instead of rounds: per repeat, plain decoding at that load (the
arm's engine's: vllm:none for vLLM arms) and each pending arm, one after another in a rotated
order, paired the same way.
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
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Protocol

import pandas as pd
import torch

from jetflow_bench.core.arms import arm_label
from jetflow_bench.core.budget_policy import AUTO_COLUMN, BudgetPolicy
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.progress import SweepProgress
from jetflow_bench.core.runtime import cpu_numerics
from jetflow_bench.engine.drafter import Drafter
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.report.loading import INTERLEAVED, TAU_ONLY
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
from jetflow_bench.sweep.groups import PairingGroup, pairing_groups
from jetflow_bench.sweep.journal import CellJournal
from jetflow_bench.sweep.load import paired_with, run_load_cell
from jetflow_bench.sweep.lossless import Verdict, judge, sampled_verdict
from jetflow_bench.sweep.memory import check_memory
from jetflow_bench.sweep.records import CellRun, DecodedBatch, Prompt
from jetflow_bench.sweep.runner import (
    batches,
    cell_run,
    decode_batch,
    request_times,
    warm_up,
)
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
    executor: GroupExecutor | None = None,
) -> SweepOutcome:
    """Run (or finish) the grid of ``config`` in the run folder ``out``.

    ``derived`` adds tables computed from the requests rows (the ablation), rebuilt with the rest.
    ``max_memory`` (bytes) replaces the available memory the grid's KV caches are checked against.
    ``engine_options`` go to the engine factory (e.g. where a vLLM server runs; not hashed). The
    engine is closed (its servers stopped) however the run ends. Every check (target, suites,
    data, memory, every drafter built once) passes before the manifest and the first cell are
    written. An ``executor`` runs the pairing groups with unfinished cells elsewhere (a cluster),
    each through `GroupRunner.run_group`, and hands their cells back to be stored here; without
    one the groups run in this process.
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
        runner = GroupRunner(engine, store, config, manifest, workloads)
        for cell in todo:  # a missing or mismatched head fails now, not after the AR cells ran
            runner.drafter(cell)
        if any(w.suite.executes_code and w.suite.scored for w in workloads.values()):
            manifest["code_sandbox"] = sandbox.isolation()  # says whether generated code had a network
            sandbox.announce()
        store.write_manifest(manifest)
        store.keep_head_records(config.drafters)  # after the manifest: a folder with one is a run folder
        rebuilt = {"at": 0.0, "cost": 0.0}

        def stored(cell: Cell) -> None:
            finished.add(cell.cell_id)
            # The combined tables are a convenience (cells/ is the record): refresh them after a
            # cell unless that would spend over 1/REBUILD_RATIO of the run rebuilding big tables.
            if time.perf_counter() - rebuilt["at"] >= REBUILD_RATIO * rebuilt["cost"]:
                started = time.perf_counter()
                store.rebuild([c.cell_id for c in grid if c.cell_id in finished], config.n_boot, config.seed, derived)
                rebuilt["at"], rebuilt["cost"] = time.perf_counter(), time.perf_counter() - started

        pending = frozenset(c.cell_id for c in todo)
        groups = [g for g in pairing_groups(grid) if any(c.cell_id in pending for c in g.cells)]
        with SweepProgress(len(grid), len(finished), show_progress) as progress:
            if executor is None:
                for group in groups:
                    runner.run_group(group, pending, hashes, progress, stored)
            else:
                stack.close()  # the engine did the checks; workers load their own, maybe on this device
                del runner, engine
                torch.cuda.empty_cache()
                job = GroupJob(config, pending, hashes, _worker_manifest(manifest), data_dir, engine_options)
                executor.run(groups, job, store, manifest, stored, progress)
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


@dataclass(frozen=True)
class Slot:
    """One timed place in a round (or a serving-load group's repeat): a cell, or a baseline's second (A/A) copy."""

    cell: Cell
    twin: bool = False


def round_order(members: Sequence[Cell], repeat: int, index: int, tau_only: bool = False) -> list[Slot]:
    """The order round ``index`` of a repeat times its cells in: the AR cell, the arms, then the AR
    cell's A/A copy (none in a τ-only run), rotated by ``repeat`` so that no arm always runs first
    or last. The two AR decodes swap roles every other round, so that neither the AR cell's own
    time (the one the arms divide by) nor the A/A copy always runs right after the arms."""
    ar = [c for c in members if c.is_baseline]
    slots = [Slot(c) for c in ar] + [Slot(c) for c in members if not c.is_baseline] + ([] if tau_only else [Slot(ar[0], True)])
    if index % 2:
        slots = [Slot(s.cell, not s.twin) if s.cell.is_baseline and not tau_only else s for s in slots]
    return rotated(slots, repeat)


def rotated(items: list, repeat: int) -> list:
    """``items`` rotated left by ``repeat``: each repeat starts one further along, so no cell always runs first."""
    shift = repeat % len(items)
    return items[shift:] + items[:shift]


def _pending_repeats(group: PairingGroup, todo: Collection[str]) -> Iterator[tuple[int, list[Cell], list[Cell]]]:
    """(repeat, the group's cells of that repeat, those of them still to run), for each repeat with
    something to run, in order."""
    for repeat in sorted({c.repeat for c in group.cells}):
        members = [c for c in group.cells if c.repeat == repeat]
        pending = [c for c in members if c.cell_id in todo]
        if pending:
            yield repeat, members, pending


class GroupRunner:
    """Times the unfinished cells of pairing groups (`run_group`), sharing engine, drafters (built once),
    prompts and the store; a cluster executor calls `run_group` once per group."""

    def __init__(
        self, engine: Engine, store: RunStore, config: SweepConfig, manifest: dict[str, Any],
        workloads: dict[str, Workload],
    ) -> None:
        self.engine, self.store, self.config, self.workloads = engine, store, config, workloads
        self.run_id, self.tau_only = manifest["run_id"], config.tau_only
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

    def base(self, cell: Cell, members: Sequence[Cell]) -> Cell:
        """The cell of ``members`` whose timing ``cell``'s speed-up divides by: its engine's plain
        decoding when the grid has it (vLLM arms: vllm:none), else the AR cell (the AR cell: itself)."""
        name = self.engine.baseline_arm(self.drafter(cell))
        ar = next(c for c in members if c.is_baseline)
        return next((c for c in members if c.drafter == name and c != cell), ar)

    def run_group(
        self, group: PairingGroup, todo: Collection[str], hashes: dict[str, str], progress: SweepProgress,
        stored: Callable[[Cell], None] = lambda cell: None,
    ) -> None:
        """Time the cells of ``group`` whose ids are in ``todo``, repeat by repeat, and store each one.

        Per repeat, the rounds go over the prompt batches; each round decodes the batch once for
        every slot of `round_order` that a pending cell needs: the pending cells, the cells they are
        paired with (timed again even when finished, so that every pair shares its round) and the
        AR cell's A/A copy. Each slot's cell is warmed up (untimed) before its first timed batch,
        at the start of that round.
        After the round, each pending cell's batch is journaled with its round's paired timings, so
        a killed run resumes at its next round. Once all rounds ran, the cells are judged and stored,
        the AR cell first (the arms are judged against its outputs); ``stored`` is told of each.
        A group at a serving load is timed by whole cells instead (`_run_load_group`).
        """
        if group.load:
            self._run_load_group(group, todo, hashes, progress, stored)
            return
        work = self.workloads[group.suite]
        chunks = batches(work.prompts, group.batch_size)
        ids = [[p.request for p in chunk] for chunk in chunks]
        for repeat, members, pending in _pending_repeats(group, todo):
            progress.start(f"{group.label()} r{repeat}: {len(pending)} cell(s) interleaved", len(chunks))
            torch.manual_seed(self.config.seed)
            session = self.session["session"]
            journals = {c: CellJournal(self.store.folder, c.cell_id, hashes[c.cell_id], c.label(), session) for c in pending}
            done = {c: journals[c].load(ids) for c in pending}
            policies: dict[Cell, BudgetPolicy | None] = {}
            for index, chunk in enumerate(chunks):
                need = [c for c in pending if index not in done[c]]
                order = round_order(members, repeat, index, self.tau_only)
                timed = self._round(order, need, members, chunk, index, work, policies)
                for cell in need:
                    done[cell][index] = self._paired(timed, cell, members)
                    journals[cell].save(done[cell][index])
                progress.advance(1, sum(len(r.output_tokens) for b in timed.values() for r in b.result.requests))
            for cell in sorted(pending, key=lambda c: not c.is_baseline):
                decoded = [done[cell][i] for i in range(len(chunks))]
                self.finalize(cell, hashes[cell.cell_id], cell_run(decoded, session, self.drafter(cell)), progress)
                journals[cell].clear()
                stored(cell)

    def _run_load_group(
        self, group: PairingGroup, todo: Collection[str], hashes: dict[str, str], progress: SweepProgress,
        stored: Callable[[Cell], None],
    ) -> None:
        """Time a serving-load group's pending cells: its requests arrive over time, so a cell is one
        serving run, not rounds of prompt batches. Per repeat, the pending cells, the plain-decoding
        cells they pair with at the same load (`base`: jfbench's AR, or vllm:none for vLLM arms;
        served again even when finished) and a second, A/A copy of each of those run one after
        another, in an order rotated per repeat; each arm's requests then carry its base run's and
        the A/A copy's times from this session (`load.paired_with`). Nothing is journaled: a killed
        repeat is served again whole."""
        work, session = self.workloads[group.suite], self.session["session"]
        for repeat, members, pending in _pending_repeats(group, todo):
            bases = {c: self.base(c, members) for c in pending}
            paired = [] if self.tau_only else list(dict.fromkeys(bases.values()))
            slots = [Slot(c) for c in members if c in pending or c in paired] + [Slot(c, True) for c in paired]
            order = rotated(slots, repeat)
            progress.start(f"{group.label()} r{repeat}: {len(pending)} serving run(s) alternated", len(order))
            torch.manual_seed(self.config.seed)
            runs = {}
            for slot in order:
                runs[slot] = run_load_cell(self.engine, slot.cell, work.prompts, self.drafter(slot.cell),
                                           self.config.warmup_tokens, session, sampling_for(self.config, slot.cell))
                progress.advance(1, sum(len(r.output_tokens) for r in runs[slot].outputs.values()))
            for cell in sorted(pending, key=lambda c: not c.is_baseline):
                run = runs[Slot(cell)]
                if not self.tau_only:
                    run = paired_with(run, runs[Slot(bases[cell])], runs[Slot(bases[cell], True)], session)
                self.finalize(cell, hashes[cell.cell_id], run, progress)
                stored(cell)

    def _round(
        self, order: list[Slot], need: list[Cell], members: list[Cell], chunk: list[Prompt], index: int,
        work: Workload, policies: dict[Cell, BudgetPolicy | None],
    ) -> dict[Slot, DecodedBatch]:  # fmt: skip
        """One prompt batch decoded, timed, for every slot that the cells in ``need`` pair with; a cell
        timed for the first time in this repeat is warmed up first, before the round's first clock."""
        wanted = {Slot(c) for c in need}
        if need and not self.tau_only:
            wanted |= {Slot(self.base(c, members)) for c in need} | {s for s in order if s.twin}
        slots = [s for s in order if s in wanted]
        for cell in dict.fromkeys(s.cell for s in slots if s.cell not in policies):
            policies[cell] = warm_up(self.engine, cell, work.prompts, self.drafter(cell), self.config.warmup_tokens,
                                     sampling_for(self.config, cell))
        return {slot: decode_batch(self.engine, slot.cell, chunk, index, self.drafter(slot.cell), self.session["session"],
                                   sampling_for(self.config, slot.cell), policies[slot.cell]) for slot in slots}

    def _paired(self, timed: dict[Slot, DecodedBatch], cell: Cell, members: list[Cell]) -> DecodedBatch:
        """``cell``'s batch of this round with the round's timings of its baseline and the A/A copy."""
        own = timed[Slot(cell)]
        if self.tau_only:
            return own
        base, twin = timed[Slot(self.base(cell, members))], next(b for s, b in timed.items() if s.twin)
        paired = {f"{prefix}_{field}": request_times(batch, field)
                  for prefix, batch in (("base", base), ("aa", twin)) for field in ("decode_s", "ttft_s")}
        return replace(own, paired=paired)

    def finalize(self, cell: Cell, chash: str, run: CellRun, progress: SweepProgress) -> None:
        """Judge losslessness and answers (untimed), then store the cell."""
        work = self.workloads[cell.suite]
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
        extra = {"pairing": TAU_ONLY if self.tau_only else INTERLEAVED, **({"resumed": run.resumed} if run.resumed else {})}
        self.store.write_cell(cell.cell_id, steps, requests, {**row, **self.session, **extra}, **optional_frames(cell, run))
        progress.end_cell(cell.label())
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


@dataclass(frozen=True)
class GroupJob:
    """What a worker needs to run pairing groups of this sweep elsewhere (sent to it; every field pickles)."""

    config: SweepConfig
    todo: frozenset[str]  # the unfinished cells' ids
    hashes: dict[str, str]  # cell id -> cell hash
    manifest: dict[str, Any]  # run id, command and session, as each cell's record names them
    data_dir: Path | None
    engine_options: Any


class GroupExecutor(Protocol):
    """Runs pairing groups elsewhere, each in one process through `run_group_in`; their cells are
    stored here through ``store`` (parts, then the record) and announced through ``stored``."""

    def run(
        self, groups: list[PairingGroup], job: GroupJob, store: RunStore, manifest: dict[str, Any],
        stored: Callable[[Cell], None], progress: SweepProgress,
    ) -> None: ...


def _worker_manifest(manifest: dict[str, Any]) -> dict[str, Any]:
    return {"run_id": manifest["run_id"], "command": manifest["command"], "sessions": manifest["sessions"][-1:]}


def run_group_in(folder: Path, job: GroupJob, group: PairingGroup) -> dict[str, Any]:
    """Run the unfinished cells of ``group`` into the run folder ``folder`` with `GroupRunner.run_group`,
    as `run_sweep` does; returns the environment.

    A cluster worker's body: ``folder`` is its scratch copy holding the finished AR cells that the
    group's arms are judged against (and the journals an earlier session left); no lock, no
    manifest, no combined tables (the driver keeps those).
    """
    config = job.config
    engine = ENGINES.get(config.engine)(config, folder, job.engine_options)
    try:
        workloads = {group.suite: load_workload(group.suite, engine, config, job.data_dir)}
        runner = GroupRunner(engine, RunStore(folder), config, job.manifest, workloads)
        with SweepProgress(len(group.cells), 0, enabled=False) as progress:
            runner.run_group(group, job.todo, job.hashes, progress)
        return environment(engine, config)
    finally:
        engine.close()


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
