"""`train_drafter`: data -> head -> AdamW steps with periodic checkpoints -> a head directory.

Every step draws its batch from a generator seeded by (seed, step), so a run resumed from its last
checkpoint sees exactly the batches an uninterrupted run would. Progress state lives in
``<out>/.partial/`` (head weights + optimiser + losses) and is removed once the head is written;
a finished ``<out>`` with the same training config is returned as is.
"""

from __future__ import annotations

import contextlib
import json
import math
import platform
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import transformers
from filelock import FileLock, Timeout
from safetensors.torch import load_file, save_file

from jetflow_bench.core import runtime
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.fingerprint import model_fingerprint
from jetflow_bench.core.progress import TrainProgress, say
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.heads.checkpoint import TargetShape, default_taps, save_head
from jetflow_bench.heads.head import DraftHead, HeadConfig
from jetflow_bench.training.config import TrainConfig, canonical_head, target_depth, train_config
from jetflow_bench.training.data import SequenceBatcher, coverage, frequent_tokens, training_sequences
from jetflow_bench.training.teacher import TeacherCache

PARTIAL = ".partial"
PARTIAL_TMP = f"{PARTIAL}.tmp"  # a checkpoint being written, renamed to PARTIAL once whole
WHOLE = "whole"  # written last into a checkpoint being saved: its files are complete
RESUMABLE_STOPS = ("time limit", "step limit")  # stops that keep the checkpoint: running again goes on
PLATEAU_SHARE = 0.2  # converged: the held-out proxy moved less than PLATEAU_CHANGE over the last 20% of the steps
PLATEAU_CHANGE = 0.02
PLATEAU_MIN_EVALS = 5
PLATEAU_WINDOW = 4  # evaluations the trend is fitted to, at least (over the last 2 x PLATEAU_SHARE of the steps)
PLATEAU_CONFIRM = 3  # consecutive evaluations that must each find the plateau
BACKWARD_FACTOR = 3  # training FLOPs = forward + backward (about twice the forward) = 3 x the counted forward


def new_head(target: TargetRunner, config: TrainConfig, d2t: torch.Tensor | None = None) -> DraftHead:
    """A freshly initialised head shaped like the target's own decoder layers (fp32 master weights);
    the family's objective sets its depth and any wiring of its own. ``d2t``: the target ids of its
    draft vocabulary (`data.frequent_tokens`) when the recipe sets ``draft_vocab``."""
    c = target.config
    tok = target.tokenizer
    mask_id = next((i for i in (tok.mask_token_id, tok.pad_token_id, *target.eos_token_ids) if i is not None), 0)
    rope = getattr(c, "rope_parameters", None) or {}
    cfg = HeadConfig(
        hidden_size=c.hidden_size, intermediate_size=c.intermediate_size, num_layers=config.num_layers(len(target.layers)),
        num_heads=target.q_heads, num_kv_heads=target.kv_heads, head_dim=target.head_dim,
        taps=tuple(default_taps(len(target.layers), min(config.num_taps, len(target.layers)))),
        block_size=config.block_size, mode=config.mode, mask_token_id=mask_id,
        rms_norm_eps=c.rms_norm_eps, rope_theta=rope.get("rope_theta") or getattr(c, "rope_theta", 1_000_000.0),
        draft_vocab=None if d2t is None else len(d2t), **config.objective.head_options(config),
    )
    head = DraftHead(cfg, target.embed, target.lm_head).to(target.device)
    head.init_weights(config.seed)
    if d2t is not None:
        head.d2t.copy_(d2t)
    with torch.no_grad():  # start from the target's output scale: the LM head expects its final norm
        head.norm.weight.copy_(target.norm.weight.float())
    return head


def lr_at(step: int, config: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to a tenth of the peak at the last step."""
    if step < config.warmup:
        return config.lr * (step + 1) / config.warmup
    progress = (step - config.warmup) / max(1, config.steps - config.warmup)
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def finished(out: Path, config: TrainConfig) -> bool:
    """Whether ``out`` holds a completed head of exactly this config (all steps run, or stopped on a
    plateau); another config there is an error."""
    try:
        raw = json.loads((out / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    training = raw.get("training", {})
    recorded = training.get("config") or {}
    recorded = {**recorded, "head": canonical_head(recorded.get("head"))}  # heads recorded as "diffusion"
    if recorded != config.to_dict():
        raise JfbenchError(f"--out {out} holds a head trained with other settings: choose another --out or delete it")
    return training.get("steps_done") == config.steps or training.get("stop_reason") == "plateau"


def _save_partial(out: Path, head: DraftHead, optimizer: torch.optim.Optimizer, step: int, history: dict[str, list]) -> None:
    tmp = out / PARTIAL_TMP
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()}, str(tmp / "head.safetensors"))
    torch.save({"step": step, **history, "optimizer": optimizer.state_dict()}, tmp / "state.pt")
    (tmp / WHOLE).touch()
    shutil.rmtree(out / PARTIAL, ignore_errors=True)
    tmp.rename(out / PARTIAL)


def latest_checkpoint(out: Path) -> Path | None:
    """The last whole checkpoint: ``.partial``, else ``.partial.tmp`` once it holds `WHOLE` (a kill
    between removing the old checkpoint and renaming the new one into place); None if neither."""
    partial, tmp = out / PARTIAL, out / PARTIAL_TMP
    if (partial / "state.pt").is_file():
        return partial
    return tmp if (tmp / WHOLE).is_file() else None


HISTORY = ("losses", "train_agreement", "heldout", "step_seconds", "supervised", "head_flops", "sessions")


def _resume(out: Path, head: DraftHead, optimizer: torch.optim.Optimizer) -> tuple[int, dict[str, list]]:
    """(first step to run, the run's history so far: `HISTORY` lists) from ``<out>/.partial``, else (0, empty)."""
    partial = latest_checkpoint(out)
    if partial is None:
        return 0, {k: [] for k in HISTORY}
    head.load_state_dict(load_file(str(partial / "head.safetensors")))
    state = torch.load(partial / "state.pt", weights_only=False)
    optimizer.load_state_dict(state["optimizer"])
    return state["step"], {k: state.get(k, []) for k in HISTORY}


def _autocast(target: TargetRunner) -> contextlib.AbstractContextManager:
    """fp32 master weights; the shared embedding/LM head run in the target's dtype."""
    if target.dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(target.device.type, dtype=target.dtype)


def heldout_proxy(
    head: DraftHead, cache: TeacherCache, picks: list[int], config: TrainConfig, target: TargetRunner
) -> dict[str, Any] | None:
    """The held-out acceptance proxy: the head drafts (as at inference, on the true path) from the
    same ``anchors`` positions of each held-out sequence at every evaluation.

    ``agreement``: per-depth top-1 agreement with the target's greedy token; ``accept_len``: the
    mean leading run of agreements, i.e. the tokens a greedy chain of depth D would get accepted
    there (on regenerated data the true path is the target's own). None without held-out data or
    when the family tracks no proxy.
    """
    generator = torch.Generator().manual_seed(config.prompt_seed + 7919)  # the same positions at every evaluation (and seed)
    hits, valid = [], []
    with torch.no_grad(), _autocast(target):
        for i in range(0, len(picks), config.batch_size):
            found = config.objective.heldout_hits(head, cache.batch(picks[i : i + config.batch_size]), config, generator)
            if found is None:
                return None
            hits.append(found[0])
            valid.append(found[1])
    if not hits:
        return None
    hit, ok = torch.cat(hits), torch.cat(valid)  # (R, D)
    agreement = (hit & ok).sum(0) / ok.sum(0).clamp(min=1)
    run = (hit & ok).long().cumprod(1).sum(1).float().mean()
    return {"agreement": [round(a, 4) for a in agreement.tolist()], "accept_len": round(run.item(), 4)}


def plateaued(heldout: list[dict[str, Any]], share: float = PLATEAU_SHARE, tolerance: float = PLATEAU_CHANGE) -> bool:
    """Whether the proxy (``accept_len``) is resolved as flat: its trend would change it by less than
    ``tolerance`` (relative) over ``share`` of the steps run, even pushed two standard errors up, at
    each of the last `PLATEAU_CONFIRM` evaluations (`_flat_at`). On a few dozen held-out sequences the
    proxy moves by ~10% between evaluations, and every test of two (smoothed) points against each
    other fired on that noise: a still-rising SmolLM2 head stopped at a tenth of its steps; a `deep`
    head stalled near 1.33 for 500 steps, stopped at 1,300, climbed to 2.18 when trained on; the
    seed-0 SmolLM2 jetflow head stopped at 2,850 while its dflash twin, level with it there, rose on
    to 4,300. A noisy curve now trains on until its trend is pinned down. Needs at least
    `PLATEAU_MIN_EVALS` evaluations, and a proxy above zero: a head flat at zero never learned
    (e.g. reverse KL stuck on a one-hot start), it did not converge."""
    if len(heldout) < max(PLATEAU_MIN_EVALS, PLATEAU_CONFIRM) or heldout[-1]["accept_len"] <= 0:
        return False
    return all(_flat_at(heldout[: len(heldout) - back], share, tolerance) for back in range(PLATEAU_CONFIRM))


def _flat_at(heldout: list[dict[str, Any]], share: float, tolerance: float) -> bool:
    """The least-squares line through the evaluations of the last 2 x ``share`` of the steps: its
    slope's magnitude plus two standard errors, times ``share`` of the steps, within ``tolerance``
    of the window's mean (at least `PLATEAU_WINDOW` evaluations)."""
    latest = heldout[-1]["step"]
    window = [(h["step"], h["accept_len"]) for h in heldout if h["step"] >= (1 - 2 * share) * latest]
    if len(window) < PLATEAU_WINDOW:
        return False
    n = len(window)
    x_mean, y_mean = sum(x for x, _ in window) / n, sum(y for _, y in window) / n
    sxx = sum((x - x_mean) ** 2 for x, _ in window)
    slope = sum((x - x_mean) * (y - y_mean) for x, y in window) / sxx
    residual = sum((y - y_mean - slope * (x - x_mean)) ** 2 for x, y in window)
    slope_se = math.sqrt(residual / (n - 2) / sxx)
    return (abs(slope) + 2 * slope_se) * share * latest <= tolerance * max(y_mean, 1e-9)


def train_drafter(
    target: str | Path | TargetRunner,
    out: str | Path,
    config: TrainConfig | None = None,
    *,
    data_dir: Path | None = None,
    device: str | None = None,
    dtype: str | None = None,
    threads: int | None = None,
    show_progress: bool = True,
    time_limit_s: float | None = None,
    stop_at_step: int | None = None,
    checkpoint_every: int = 50,
    **options: Any,
) -> Path:
    """Train a draft head for ``target`` into ``out`` and return ``out``.

    ``config`` or keyword ``options`` (fields of `TrainConfig`, e.g. ``drafter="jetflow", steps=200``)
    choose the recipe. An interrupted run resumes from its last checkpoint; ``time_limit_s`` and
    ``stop_at_step`` (a step of the ``steps`` schedule) stop early (the checkpoint keeps going on the
    next call). Every ``eval_every`` steps the held-out
    proxy (`heldout_proxy`) is measured; with ``stop_on_plateau`` the run ends once it `plateaued`.
    """
    config = (config or train_config(**options)).for_target(target_depth(target))
    out = Path(out)
    if finished(out, config):
        return out
    with sole_trainer(out):
        return _train(target, out, config, data_dir, device, dtype, threads, show_progress, time_limit_s, stop_at_step,
                      checkpoint_every)


@contextlib.contextmanager
def sole_trainer(out: Path) -> Iterator[None]:
    """Hold ``out``'s training lock (beside it) for one trainer: a second process training the same
    folder would interleave its checkpoints with the first's. Refused at once, naming the fix."""
    out.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(out.parent / f".{out.name}.train.lock")
    try:
        lock.acquire(blocking=False)
    except Timeout:
        raise JfbenchError(f"{out}: another process is training this head now: wait for it (run the command again "
                           "afterwards to resume or reuse it) or choose another --out") from None
    try:
        yield
    finally:
        lock.release()


def _train(
    target: str | Path | TargetRunner, out: Path, config: TrainConfig, data_dir: Path | None, device: str | None,
    dtype: str | None, threads: int | None, show_progress: bool, time_limit_s: float | None, stop_at_step: int | None,
    checkpoint_every: int,
) -> Path:
    """`train_drafter`'s work, under the folder's training lock."""
    runtime.set_threads(threads)
    runner = target if isinstance(target, TargetRunner) else TargetRunner.load(target, device, dtype)
    runner.model.requires_grad_(False)
    started = time.perf_counter()
    samples = training_sequences(runner, config, data_dir, show_progress)
    batcher = SequenceBatcher(samples, config.seq_len, config.block_size + 2, config.heldout)
    if show_progress:
        say(f"training on {batcher.train_count} sequences ({batcher.token_count():,} tokens, "
            f"{batcher.prompt_share():.0%} prompt: loss on the continuation only; data={config.data}), "
            f"{len(batcher.heldout_picks())} held out")
    d2t = None if config.draft_vocab is None else frequent_tokens(batcher.train_samples, config.draft_vocab, runner.embed.num_embeddings)
    head = new_head(runner, config, d2t)
    optimizer = torch.optim.AdamW(head.parameters(), lr=config.lr, betas=(0.9, 0.95), weight_decay=0.0)
    teacher_cache = TeacherCache.ensure(runner, batcher.samples, head.cfg.taps, show_progress)
    start, history = _resume(out, head, optimizer)
    setup_s = time.perf_counter() - started
    objective, meter = config.objective, head.count_cost()
    every = config.eval_every or max(1, config.steps // 20)
    label = f"{config.drafter} head" + (f" (resumed at {start})" if start else "")
    done, stop_reason = start, "steps"
    with TrainProgress(config.steps - start, config.batch_size * config.seq_len, label, show_progress) as progress:
        for step in range(start, config.steps if stop_at_step is None else min(config.steps, stop_at_step)):
            step_started = time.perf_counter()
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, config)
            generator = torch.Generator().manual_seed(config.seed * 1_000_003 + step)
            teacher = teacher_cache.batch(batcher.draw(config.batch_size, generator))
            with _autocast(runner):
                loss, agreement = objective.loss(head, teacher, config, generator)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), config.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            done = step + 1
            history["losses"].append(round(loss.item(), 4))
            history["train_agreement"].append(round(agreement.item(), 4))
            history["supervised"].append(teacher.supervised)
            history["head_flops"].append(BACKWARD_FACTOR * meter.take(1).flops[0])  # forward + backward
            history["step_seconds"].append(round(time.perf_counter() - step_started, 4))
            progress.update(done - start, history["losses"][-1])
            if done % every == 0 or done == config.steps:
                proxy = heldout_proxy(head, teacher_cache, batcher.heldout_picks(), config, runner)
                meter.take(1)  # evaluation is not training compute
                if proxy is not None:
                    history["heldout"].append({"step": done, **proxy})
                    if config.stop_on_plateau and plateaued(history["heldout"]):
                        stop_reason = "plateau"
            out_of_time = time_limit_s is not None and time.perf_counter() - started > time_limit_s
            if out_of_time and stop_reason != "plateau":
                stop_reason = "time limit"
            if done % checkpoint_every == 0 and stop_reason == "steps":
                _save_partial(out, head, optimizer, done, _with_session(history, started))
            if stop_reason != "steps":
                break
    if stop_reason == "steps" and done < config.steps:
        stop_reason = "step limit"
    history = _with_session(history, started)  # one figure for the partial and the record
    if stop_reason in RESUMABLE_STOPS:
        _save_partial(out, head, optimizer, done, history)
    info = _record(config, runner, batcher, history, done, stop_reason, setup_s)
    if d2t is not None:  # how much of the text the head can propose at all
        info["draft_vocab_coverage"] = round(coverage(batcher.train_samples, d2t), 4)
    save_head(head, out, config.drafter, TargetShape.of(runner), info)
    if stop_reason not in RESUMABLE_STOPS:
        for checkpoint in (PARTIAL, PARTIAL_TMP):
            shutil.rmtree(out / checkpoint, ignore_errors=True)
    elif show_progress:
        print(f"stopped at step {done}/{config.steps} ({stop_reason}); run again to resume", file=sys.stderr)
    return out


def _with_session(history: dict[str, list], started: float) -> dict[str, list]:
    """``history`` with this session's wall-clock so far appended to the earlier sessions' (a resumed
    run's record then counts every session, not only the last)."""
    return {**history, "sessions": [*history["sessions"], round(time.perf_counter() - started, 2)]}


def _record(
    config: TrainConfig, runner: TargetRunner, batcher: SequenceBatcher, history: dict[str, list], done: int,
    stop_reason: str, setup_s: float,
) -> dict[str, Any]:
    """The head's training record (config.json ``training``): recipe, data, curves, cost, convergence."""
    losses, heldout = history["losses"], history["heldout"]

    def mean(values: list) -> float | None:
        return sum(values) / len(values) if values else None

    return {
        "config": config.to_dict(), "steps_done": done, "stop_reason": stop_reason,
        "target_fingerprint": model_fingerprint(runner.name), "block_layout": config.setting("layout"),
        "recipe": config.resolved(len(runner.layers)),
        "sequences": batcher.train_count, "heldout_sequences": len(batcher.heldout_picks()),
        "training_tokens": batcher.token_count(), "prompt_token_share": round(batcher.prompt_share(), 4),
        "first_loss": losses[0] if losses else None, "last_loss_mean": mean(losses[-10:]),
        "last_top1_agreement": history["train_agreement"][-1] if history["train_agreement"] else None,
        "losses": losses, "train_agreement": history["train_agreement"],
        "heldout": heldout, "heldout_accept_len": heldout[-1]["accept_len"] if heldout else None,
        "converged": plateaued(heldout) if heldout else None,
        "supervised_positions_per_step": mean(history["supervised"]),
        "head_flops_per_step": mean(history["head_flops"]),
        "step_seconds_mean": mean(history["step_seconds"]), "setup_seconds": round(setup_s, 2),
        "seconds": round(sum(history["sessions"]), 2), "sessions_seconds": history["sessions"],
        "device": runner.device.type, "dtype": str(runner.dtype).removeprefix("torch."), "cpu_numerics": runtime.cpu_numerics(),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__},
    }
