"""Corpus -> tokenizer -> model -> training -> held-out perplexity -> a Hugging Face folder.

`build_toy_target` writes into a folder it is given and ends by writing `jfbench_toy.json`, the
completion marker; `ensure_toy_target` (package `__init__`) handles caching and atomic renames.
"""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import tokenizers
import torch
import transformers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3ForCausalLM

from jetflow_bench.core.progress import TrainProgress
from jetflow_bench.core.runtime import cpu_numerics
from jetflow_bench.toy.corpus import CorpusFile, Document, load_documents
from jetflow_bench.toy.data import (
    WindowSampler,
    heldout_windows,
    mixture_weights,
    split_heldout,
    tokenize_stream,
)
from jetflow_bench.toy.presets import FORMAT_VERSION, MARKER, ToyPreset
from jetflow_bench.toy.tokenizer import train_tokenizer
from jetflow_bench.toy.train import build_model, heldout_nll, train_steps, uses_bf16_autocast


def _tokenizer_texts(
    train_docs: dict[str, list[Document]], weights: dict[str, float], max_chars: int
) -> Iterator[str]:
    """Training segments for the BPE trainer, each source capped at its mixture share of `max_chars`."""
    for name, docs in train_docs.items():
        budget = weights[name] * max_chars
        for doc in docs:
            if budget <= 0:
                break
            for seg in doc:
                budget -= len(seg)
                yield seg


def _perplexities(model: Qwen3ForCausalLM, heldout: dict[str, torch.Tensor], preset: ToyPreset) -> dict:
    """Held-out perplexity per source and over all scored tokens, with uniform guessing as reference."""
    windows_per_source = max(1, preset.eval_windows // len(heldout))
    total_nll, total_count, per_source = 0.0, 0, {}
    for name, stream in heldout.items():
        windows = heldout_windows(stream, preset.seq_len, windows_per_source)  # (W, T)
        nll, count = heldout_nll(model, windows, preset.batch_size)
        per_source[name] = {"perplexity": math.exp(nll / count), "tokens": count}
        total_nll, total_count = total_nll + nll, total_count + count
    return {
        "perplexity": math.exp(total_nll / total_count),
        "tokens": total_count,
        "uniform_perplexity": model.config.vocab_size,
        "per_source": per_source,
    }


def build_toy_target(
    preset: ToyPreset,
    files: list[CorpusFile],
    out: Path,
    seed: int,
    config_hash: str,
    show_progress: bool = True,
) -> dict:
    """Train tokenizer and model on `files` and save both into `out`; returns the stored summary."""
    started = time.perf_counter()
    transformers.set_seed(seed)
    weights = mixture_weights([f.name for f in files], preset.mixture)
    train_docs, heldout_docs = {}, {}
    for i, file in enumerate(files):
        docs = load_documents(file, preset.max_chars_per_source)
        train_docs[file.name], heldout_docs[file.name] = split_heldout(
            docs, preset.heldout_fraction, seed + i
        )

    tokenizer: PreTrainedTokenizerFast = train_tokenizer(
        _tokenizer_texts(train_docs, weights, preset.tokenizer_max_chars),
        preset.vocab_size,
        preset.max_position_embeddings,
    )
    train_streams = {name: tokenize_stream(tokenizer, docs) for name, docs in train_docs.items()}
    heldout_streams = {name: tokenize_stream(tokenizer, docs) for name, docs in heldout_docs.items()}
    heldout_streams = {
        name: s for name, s in heldout_streams.items() if len(s) >= 2
    }  # 1 token predicts nothing
    prep_seconds = time.perf_counter() - started

    torch.manual_seed(seed)
    model = build_model(preset, tokenizer)
    n_params = sum(p.numel() for p in model.parameters())
    tokens_per_step = preset.batch_size * preset.seq_len
    progress = TrainProgress(
        preset.steps, tokens_per_step, f"{preset.name} ({n_params / 1e6:.2f}M)", show_progress
    )
    train_started = time.perf_counter()
    losses = train_steps(model, WindowSampler(train_streams, weights), preset, seed, progress)
    train_seconds = time.perf_counter() - train_started
    heldout = _perplexities(model, heldout_streams, preset) if heldout_streams else None

    out.mkdir(parents=True, exist_ok=True)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=False
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    summary = {
        "preset": preset.name,
        "config_hash": config_hash,
        "seed": seed,
        "format_version": FORMAT_VERSION,
        "training": dataclasses.asdict(preset),
        "threads": torch.get_num_threads(),
        "cpu_numerics": cpu_numerics(),  # the same seed trains to other weights under other kernels
        "bf16_autocast": uses_bf16_autocast(preset),  # the preset's ask, where the CPU runs bf16 natively
        "parameters": n_params,
        "vocab_size": len(tokenizer),
        "corpus": {
            name: {
                "file": str(file.path),
                "mixture_weight": weights[name],
                "train_docs": len(train_docs[name]),
                "heldout_docs": len(heldout_docs[name]),
                "train_chars": sum(len(s) for d in train_docs[name] for s in d),
                "train_tokens": len(train_streams[name]),
                "heldout_tokens": len(heldout_streams.get(name, ())),
            }
            for name, file in zip(train_docs, files, strict=True)
        },
        "heldout": heldout,
        "losses": {
            "first": losses[0],
            "last_10_mean": sum(losses[-10:]) / len(losses[-10:]),
            "every_step": [round(x, 4) for x in losses],
        },
        "tokens_seen": preset.steps * tokens_per_step,
        "seconds": {"prepare": prep_seconds, "train": train_seconds, "total": time.perf_counter() - started},
        "tokens_per_second": preset.steps * tokens_per_step / train_seconds,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        },
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    (out / MARKER).write_text(json.dumps(summary, indent=1) + "\n")
    return summary
