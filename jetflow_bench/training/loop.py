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
from pathlib import Path
from typing import Any

import torch
import transformers
from safetensors.torch import load_file, save_file

from jetflow_bench import runtime
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.errors import JfbenchError
from jetflow_bench.fingerprint import model_fingerprint
from jetflow_bench.heads.checkpoint import TargetShape, default_taps, save_head
from jetflow_bench.heads.head import DraftHead, HeadConfig
from jetflow_bench.toy.progress import TrainProgress
from jetflow_bench.training.config import TrainConfig, canonical_head
from jetflow_bench.training.data import SequenceBatcher, training_sequences
from jetflow_bench.training.teacher import teacher_batch

PARTIAL = ".partial"


def new_head(target: TargetRunner, config: TrainConfig) -> DraftHead:
    """A freshly initialised head shaped like the target's own decoder layers (fp32 master weights);
    the family's objective sets its depth and any wiring of its own."""
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
        **config.objective.head_options(config),
    )
    head = DraftHead(cfg, target.embed, target.lm_head).to(target.device)
    head.init_weights(config.seed)
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
    """Whether ``out`` holds a completed head of exactly this config; another config there is an error."""
    try:
        raw = json.loads((out / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    training = raw.get("training", {})
    recorded = training.get("config") or {}
    recorded = {**recorded, "head": canonical_head(recorded.get("head"))}  # heads recorded as "diffusion"
    if recorded != config.to_dict():
        raise JfbenchError(f"--out {out} holds a head trained with other settings: choose another --out or delete it")
    return training.get("steps_done") == config.steps


def _save_partial(out: Path, head: DraftHead, optimizer: torch.optim.Optimizer, step: int, losses: list[float]) -> None:
    tmp = out / f"{PARTIAL}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file({k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()}, str(tmp / "head.safetensors"))
    torch.save({"step": step, "losses": losses, "optimizer": optimizer.state_dict()}, tmp / "state.pt")
    shutil.rmtree(out / PARTIAL, ignore_errors=True)
    tmp.rename(out / PARTIAL)


def _resume(out: Path, head: DraftHead, optimizer: torch.optim.Optimizer) -> tuple[int, list[float]]:
    """(first step to run, losses so far) from ``<out>/.partial``, else (0, [])."""
    partial = out / PARTIAL
    if not (partial / "state.pt").is_file():
        return 0, []
    head.load_state_dict(load_file(str(partial / "head.safetensors")))
    state = torch.load(partial / "state.pt", weights_only=False)
    optimizer.load_state_dict(state["optimizer"])
    return state["step"], state["losses"]


def _autocast(target: TargetRunner) -> contextlib.AbstractContextManager:
    """fp32 master weights; the shared embedding/LM head run in the target's dtype."""
    if target.dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(target.device.type, dtype=target.dtype)


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
    checkpoint_every: int = 50,
    **options: Any,
) -> Path:
    """Train a draft head for ``target`` into ``out`` and return ``out``.

    ``config`` or keyword ``options`` (fields of `TrainConfig`, e.g. ``drafter="jetflow", steps=200``)
    choose the recipe. An interrupted run resumes from its last checkpoint; ``time_limit_s`` stops
    early (the checkpoint keeps going on the next call).
    """
    config = config or TrainConfig(**options)
    out = Path(out)
    if finished(out, config):
        return out
    runtime.set_threads(threads)
    runner = target if isinstance(target, TargetRunner) else TargetRunner.load(target, device, dtype)
    runner.model.requires_grad_(False)
    started = time.perf_counter()
    sequences = training_sequences(runner, config, data_dir, show_progress)
    pad = runner.tokenizer.pad_token_id if runner.tokenizer.pad_token_id is not None else 0
    batcher = SequenceBatcher(sequences, config.seq_len, config.block_size + 2, pad)
    if show_progress:
        print(f"training on {len(batcher.sequences)} sequences ({batcher.token_count():,} tokens, data={config.data})", file=sys.stderr)
    head = new_head(runner, config)
    optimizer = torch.optim.AdamW(head.parameters(), lr=config.lr, betas=(0.9, 0.95), weight_decay=0.0)
    start, losses = _resume(out, head, optimizer)
    objective = config.objective
    label = f"{config.drafter} head" + (f" (resumed at {start})" if start else "")
    agree = float("nan")
    done = start
    with TrainProgress(config.steps - start, config.batch_size * config.seq_len, label, show_progress) as progress:
        for step in range(start, config.steps):
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, config)
            generator = torch.Generator().manual_seed(config.seed * 1_000_003 + step)
            tokens, lengths = batcher.batch(config.batch_size, generator)  # (B, T), (B,)
            teacher = teacher_batch(runner, tokens, lengths, head.cfg.taps)
            with _autocast(runner):
                loss, agreement = objective.loss(head, teacher, config, generator)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(head.parameters(), config.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            agree = agreement.item()
            done = step + 1
            progress.update(done - start, losses[-1])
            out_of_time = time_limit_s is not None and time.perf_counter() - started > time_limit_s
            if done % checkpoint_every == 0 or out_of_time:
                _save_partial(out, head, optimizer, done, losses)
            if out_of_time:
                break
    info = {
        "config": config.to_dict(), "steps_done": done, "target_fingerprint": model_fingerprint(runner.name),
        "block_layout": config.resolved_layout,
        "sequences": len(batcher.sequences), "training_tokens": batcher.token_count(),
        "first_loss": losses[0] if losses else None, "last_loss_mean": sum(losses[-10:]) / max(1, len(losses[-10:])),
        "last_top1_agreement": agree, "losses": [round(x, 4) for x in losses], "seconds": time.perf_counter() - started,
        "device": runner.device.type, "dtype": str(runner.dtype).removeprefix("torch."),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__},
    }
    save_head(head, out, config.drafter, TargetShape.of(runner), info)
    if done == config.steps:
        shutil.rmtree(out / PARTIAL, ignore_errors=True)
    elif show_progress:
        print(f"stopped at step {done}/{config.steps} (time limit); run again to resume", file=sys.stderr)
    return out
