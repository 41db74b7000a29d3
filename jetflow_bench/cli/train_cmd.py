"""`jfbench train`: train a draft head for a target (any drafter family that declares a training objective)."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated

import typer

from jetflow_bench.cli import app
from jetflow_bench.cli.options import DataDirOpt, DeviceOpt, DtypeOpt, TargetOpt, ThreadsOpt
from jetflow_bench.cli.recipe_flags import EXTRA_FLAGS, epilog, family_flags, option_pairs
from jetflow_bench.core.errors import JfbenchError, writable_folder
from jetflow_bench.core.runtime import pin_portable_cpu_numerics
from jetflow_bench.training.config import SOURCES, TrainConfig, train_config

# Every recipe flag's default is the recipe's own (`TrainConfig`), read without a drafter lookup: --help stays light.
_DEFAULTS = SimpleNamespace(**{f.name: f.default for f in dataclasses.fields(TrainConfig)})


@app.command("train", context_settings=EXTRA_FLAGS, epilog=epilog("--NAME VALUE or --option NAME=VALUE"))
def train(
    ctx: typer.Context,
    drafter: Annotated[str, typer.Option("--drafter", help="A drafter with a training objective: eagle, dflash (DFlash-T), "
                                   "jetflow, or a plug-in's.")],
    target: TargetOpt,
    out: Annotated[Path, typer.Option("--out", help="Head folder to write (config.json + model.safetensors).")],
    head: Annotated[
        str | None,
        typer.Option("--head", help="In-block attention: causal or bidirectional (alias: diffusion). "
                                "Default: the drafter's own (dflash bidirectional, else causal)."),
    ] = _DEFAULTS.head,
    loss: Annotated[str, typer.Option("--loss", help="fkl (forward KL), rkl (reverse KL) or sft (target argmax).")] = _DEFAULTS.loss,
    data: Annotated[
        str, typer.Option("--data", help="regen (the target's own continuations, cached) or raw (corpus answers).")
    ] = _DEFAULTS.data,
    corpus: Annotated[
        str, typer.Option("--corpus", "--suites", help=f"Training prompt sources (training splits): {','.join(SOURCES)}.")
    ] = ",".join(_DEFAULTS.corpus),
    prompts: Annotated[int, typer.Option("--prompts", min=1, help="Training prompts drawn from the sources.")] = _DEFAULTS.prompts,
    max_new_tokens: Annotated[
        int, typer.Option("--max-new-tokens", min=1, help="Length of each regenerated continuation.")
    ] = _DEFAULTS.max_new_tokens,
    steps: Annotated[int, typer.Option("--steps", min=1, help="Optimiser steps.")] = _DEFAULTS.steps,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Sequences per step.")] = _DEFAULTS.batch_size,
    seq_len: Annotated[int, typer.Option("--seq-len", min=4, help="Tokens per training sequence.")] = _DEFAULTS.seq_len,
    lr: Annotated[float, typer.Option("--lr", help="Peak AdamW learning rate.")] = _DEFAULTS.lr,
    layers: Annotated[
        int | None, typer.Option("--layers", min=1, help="Draft layers. Default: 1 for eagle; block heads 5/36 of a target of 24+ layers with as many tapped "
                                                   "layers (4 for SmolLM2's 30, 5 for 36), else 1/7 of its layers, at least 2.")
    ] = _DEFAULTS.layers,
    block_size: Annotated[
        int, typer.Option("--block-size", min=2, help="Anchor + drafted positions of block heads.")
    ] = _DEFAULTS.block_size,
    anchors: Annotated[int, typer.Option("--anchors", min=1, help="Blocks per sequence per step.")] = _DEFAULTS.anchors,
    option: Annotated[
        list[str] | None,
        typer.Option("--option", help="A recipe field of the drafter's family, NAME=VALUE (repeatable); "
                     "also --NAME VALUE. Each family's fields are listed below."),
    ] = None,
    heldout: Annotated[
        int, typer.Option("--heldout", min=0, help="Sequences held out of training for the acceptance proxy "
                          "(per-depth top-1 agreement with the target; at most a fifth of the data).")
    ] = _DEFAULTS.heldout,
    eval_every: Annotated[
        int | None, typer.Option("--eval-every", min=1, help="Steps between held-out evaluations. Default: steps / 20.")
    ] = _DEFAULTS.eval_every,
    stop_on_plateau: Annotated[
        bool, typer.Option("--stop-on-plateau", help="End once the held-out proxy's trend over the last 40% of the steps, plus two standard errors, "
                     "moves it < 2% per 20% of the steps (at three evaluations running; docs/drafters.md).")
    ] = _DEFAULTS.stop_on_plateau,
    draft_vocab: Annotated[
        int | None,
        typer.Option("--draft-vocab", min=1, help="Reduced draft vocabulary (EAGLE-3's d2t): the head scores only the N "
                     "most frequent continuation tokens of its training data, mapped back to target ids. Cuts the "
                     "LM-head cost by V/N; output stays lossless. Default: the whole vocabulary."),
    ] = _DEFAULTS.draft_vocab,
    decay: Annotated[
        float,
        typer.Option("--decay", min=0.0, help="Loss weight exp(-(k-1)/decay) at drafted depth k (DFlash's gamma); "
                     "0 = every depth weighs the same. The paper's loss-weighting table uses 0, 3, 7, 15."),
    ] = _DEFAULTS.decay,
    seed: Annotated[
        int, typer.Option("--seed", min=0, help="Seeds initialisation and batch order, and the training-prompt draw "
                          "unless --data-seed is given.")
    ] = _DEFAULTS.seed,
    data_seed: Annotated[
        int | None,
        typer.Option("--data-seed", min=0, help="Seeds the training-prompt draw alone, so heads of several --seeds "
                     "share one regenerated data set (and its held-out part): cheap extra seeds on a real target, "
                     "and seed spread that is initialisation only. Default: --seed."),
    ] = _DEFAULTS.data_seed,
    seeds: Annotated[
        str | None,
        typer.Option("--seeds", help="Train one head per seed, e.g. 0,1,2, into <out>/seed-<N> (replaces --seed)."),
    ] = None,
    time_limit: Annotated[
        float | None,
        typer.Option("--time-limit", min=0.1, help="Stop after this many minutes of wall time, counted from the start: "
                     "regenerating the data and scoring the teacher's features count too. Running the command "
                     "again resumes."),
    ] = None,
    stop_at_step: Annotated[
        int | None,
        typer.Option("--stop-at-step", min=1, help="Stop after this step of the --steps schedule, as --time-limit "
                     "stops (running again with a later step resumes): cut a head where another recipe's head was "
                     "cut, for a comparison at equal steps."),
    ] = None,
    portable_numerics: Annotated[
        bool,
        typer.Option("--portable-numerics", help="Cap torch's CPU kernels at AVX2 and MKL at its compatible branch, "
                     "so one seed trains the same head on x86-64 CPUs of one vendor (without it, an AVX-512 and an "
                     "AVX2 machine train different ones; with it, Intel and AMD still can). May be slower; the "
                     "record's cpu_numerics says which kernels ran."),
    ] = False,
    data_dir: DataDirOpt = None,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    threads: ThreadsOpt = None,
) -> None:
    """Train a draft head against the frozen target; print the head folder and a JSON summary.

    Checkpoints every 50 steps into <out>/.partial; an interrupted run resumes where it stopped,
    and a finished <out> with the same settings is returned as is. Regenerated training data is
    cached under the jfbench cache folder (JFBENCH_CACHE). On a busy small CPU, --threads 1 is
    often several times faster for toy-sized targets than torch's default.

    Examples:

        jfbench train --drafter jetflow --target ~/.cache/jfbench/targets/micro-seed0-... --out heads/jetflow

        jfbench train --drafter dflash --target DIR --out heads/dflash --steps 600 --time-limit 20

        jfbench train --drafter jetflow --head bidirectional --loss rkl --data raw --target DIR --out heads/abl

        jfbench train --drafter dflash --decay 0 --target DIR --out heads/dflash-uniform
    """
    if portable_numerics:
        pin_portable_cpu_numerics()  # before the imports below load torch
    from jetflow_bench.sweep.grid import parse_ints
    from jetflow_bench.training import train_drafter

    config = train_config(
        drafter, head=head, loss=loss, data=data, corpus=tuple(s.strip() for s in corpus.split(",") if s.strip()),
        prompts=prompts, max_new_tokens=max_new_tokens, steps=steps, batch_size=batch_size, seq_len=seq_len, lr=lr,
        layers=layers, block_size=block_size, anchors=anchors, decay=decay,
        draft_vocab=draft_vocab, heldout=heldout, eval_every=eval_every, stop_on_plateau=stop_on_plateau,
        seed=seed, data_seed=data_seed, options={**family_flags(ctx.args), **option_pairs(option, "--option")},
    )
    if seeds is not None and seed != _DEFAULTS.seed:
        raise JfbenchError("--seed and --seeds both given: use --seeds 0,1,2 alone")
    runs = [(out, config)] if seeds is None else [
        (out / f"seed-{s}", dataclasses.replace(config, seed=s)) for s in parse_ints(seeds, "--seeds", minimum=0)
    ]
    for folder, run in runs:
        writable_folder(folder, "--out")
        started = time.time()
        path = train_drafter(
            target, folder, run, data_dir=data_dir, device=device, dtype=dtype, threads=threads,
            time_limit_s=time_limit * 60 if time_limit else None, stop_at_step=stop_at_step,
        )
        training = json.loads((path / "config.json").read_text())["training"]
        keys = ("steps_done", "stop_reason", "sequences", "training_tokens", "prompt_token_share", "first_loss",
                "last_loss_mean", "last_top1_agreement", "heldout_accept_len", "converged", "supervised_positions_per_step",
                "head_flops_per_step", "step_seconds_mean", "draft_vocab_coverage")
        summary = {k: training.get(k) for k in keys} | {"seed": run.seed, "data_seed": run.prompt_seed}
        summary["reused"] = (path / "config.json").stat().st_mtime < started
        typer.echo(str(path))
        typer.echo(json.dumps(summary))
