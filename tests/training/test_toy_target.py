"""The toy target: training, loading like a real model, determinism, caching, corpus errors, CLI."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.runtime import cpu_numerics
from jetflow_bench.toy import PRESETS, ensure_toy_target, toy_target_path
from jetflow_bench.toy import corpus as corpus_mod
from jetflow_bench.toy.corpus import CorpusFile, _exchanges, find_corpus_files, load_documents

# A toy-of-the-toy: trains in about a second, enough to check the plumbing.
NANO = dataclasses.replace(
    PRESETS["micro"],
    name="nano",
    vocab_size=320,
    hidden_size=32,
    intermediate_size=64,
    num_layers=2,
    num_heads=2,
    num_kv_heads=1,
    head_dim=16,
    steps=6,
    batch_size=4,
    seq_len=48,
    warmup_steps=2,
    lr=1e-2,
    eval_windows=4,
    tokenizer_max_chars=100_000,
)


def _write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture(scope="module")
def small_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """GSM8K- and MBPP-shaped files with simple, learnable records."""
    root = tmp_path_factory.mktemp("data")
    gsm = [
        {
            "question": f"Tom has {a} apples and buys {b} more. How many apples does he have?",
            "answer": f"Tom has {a}+{b} = <<{a}+{b}={a + b}>>{a + b} apples.\n#### {a + b}",
        }
        for a in range(2, 14)
        for b in range(3, 12)
    ]
    _write_jsonl(root / "gsm8k" / "train.jsonl", gsm)
    mbpp = [
        {"text": f"Write a function to add {k}.", "code": f"def add_{k}(x):\r\n\treturn x + {k}"}
        for k in range(40)
    ]
    _write_jsonl(root / "mbpp" / "mbpp.jsonl", mbpp)
    return root


def _train(data: Path, out: Path, **kwargs) -> Path:
    return ensure_toy_target(kwargs.pop("preset", NANO), data, out, show_progress=False, **kwargs)


def test_trained_folder_loads_like_a_real_model_and_generates(small_data: Path, tmp_path: Path) -> None:
    folder = _train(small_data, tmp_path / "nano")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.config.model_type == "qwen3"
    assert (model.config.num_attention_heads, model.config.num_key_value_heads) == (2, 1)
    assert tokenizer.eos_token == "<|endoftext|>" and tokenizer.pad_token == "<|pad|>"
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    prompt = tokenizer("Question: Tom has 3 apples and buys 4 more.\nAnswer:", return_tensors="pt")
    out = model.generate(**prompt, max_new_tokens=5, do_sample=False)
    assert out.shape[1] > prompt.input_ids.shape[1]
    summary = json.loads((folder / "jfbench_toy.json").read_text())
    assert summary["corpus"]["gsm8k"]["heldout_docs"] >= 1
    assert 1.0 < summary["heldout"]["perplexity"] < float("inf")
    assert summary["cpu_numerics"] == cpu_numerics()  # the CI gate refuses a cached target trained under other kernels
    assert tokenizer.decode(tokenizer("x = 12 + 3\n\tdef f(): ü").input_ids) == "x = 12 + 3\n\tdef f(): ü"


def test_same_seed_gives_identical_weights(small_data: Path, tmp_path: Path) -> None:
    a = load_file(_train(small_data, tmp_path / "a") / "model.safetensors")
    b = load_file(_train(small_data, tmp_path / "b") / "model.safetensors")
    c = load_file(_train(small_data, tmp_path / "c", seed=1) / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a if a[k].shape == c[k].shape)


def test_loss_decreases_over_a_short_run(small_data: Path, tmp_path: Path) -> None:
    folder = _train(small_data, tmp_path / "nano", steps=40)
    losses = json.loads((folder / "jfbench_toy.json").read_text())["losses"]["every_step"]
    assert len(losses) == 40
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 1.0


def test_cache_path_is_reused_and_keyed_by_config(small_data: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("JFBENCH_CACHE", str(tmp_path / "cache"))
    first = ensure_toy_target(NANO, small_data, show_progress=False)
    assert first == toy_target_path(NANO, small_data)
    assert first.parent == tmp_path / "cache" / "targets" and first.name.startswith("nano-seed0-")
    stamp = (first / "jfbench_toy.json").stat().st_mtime_ns
    assert ensure_toy_target(NANO, small_data, show_progress=False) == first
    assert (first / "jfbench_toy.json").stat().st_mtime_ns == stamp  # reused, not retrained
    assert toy_target_path(NANO, small_data, steps=7) != first
    assert toy_target_path(NANO, small_data, seed=1) != first
    assert [p.name for p in first.parent.iterdir() if not p.name.endswith(".lock")] == [first.name]


def test_refuses_to_overwrite_a_folder_that_is_not_a_toy_target(small_data: Path, tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(JfbenchError, match="not empty"):
        _train(small_data, tmp_path / "mine", force=True)


def test_corpus_errors_name_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "gsm8k" / "train.jsonl"
    path.parent.mkdir()
    path.write_text('{"question": "q", "answer": "a"}\n{"question": oops}\n')
    with pytest.raises(JfbenchError, match=r"train\.jsonl:2: not valid JSON"):
        load_documents(CorpusFile("gsm8k", path))
    path.write_text('{"question": "q", "answer": "a"}\n\n{"question": "q"}\n')
    with pytest.raises(JfbenchError, match=r"train\.jsonl:3: field 'answer' is missing"):
        load_documents(CorpusFile("gsm8k", path))


def test_documents_use_the_suite_prompt_formats(small_data: Path) -> None:
    gsm = load_documents(CorpusFile("gsm8k", small_data / "gsm8k" / "train.jsonl"))
    assert gsm[0][0].startswith("Question: Tom has 2 apples") and "\nAnswer: Tom has" in gsm[0][0]
    assert gsm[0][0].endswith("#### 5")
    mbpp = load_documents(CorpusFile("mbpp", small_data / "mbpp" / "mbpp.jsonl"))
    assert mbpp[1] == ("Write a function to add 1.\ndef add_1(x):\n\treturn x + 1",)
    turns = [
        {"from": "gpt", "value": "orphan"},
        {"from": "human", "value": "Hi"},
        {"from": "human", "value": "there"},
        {"from": "system", "value": "ignored"},
        {"from": "gpt", "value": "Hello!"},
        {"from": "human", "value": "unanswered"},
    ]
    assert _exchanges(turns, "x") == ("User: Hi\n\nthere\nAssistant: Hello!",)


def test_data_dir_without_corpus_falls_back_to_package_data_or_fails(tmp_path: Path, monkeypatch) -> None:
    fake = tmp_path / "HumanEval.jsonl.gz"
    fake.write_bytes(b"")
    monkeypatch.setattr(corpus_mod, "_package_humaneval", lambda: fake)
    assert [f.name for f in find_corpus_files(tmp_path)] == ["humaneval"]
    monkeypatch.setattr(corpus_mod, "_package_humaneval", lambda: None)
    with pytest.raises(JfbenchError, match="no training corpus"):
        find_corpus_files(tmp_path)
    with pytest.raises(JfbenchError, match="is not a folder"):
        find_corpus_files(tmp_path / "missing")


def test_cli_unknown_preset_is_one_line_exit_2(cli) -> None:
    code, out, err = cli("target", "train", "--preset", "tinny")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "'tinny'" in err and "did you mean 'tiny'" in err


def test_cli_info_reports_parameters_and_perplexity(small_data: Path, tmp_path: Path, cli) -> None:
    folder = _train(small_data, tmp_path / "nano")
    code, out, _ = cli("target", "info", str(folder), "--format", "json")
    record = json.loads(out)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert code == 0 and record["parameters"] == sum(p.numel() for p in model.parameters())
    assert record["toy"]["preset"] == "nano" and record["toy"]["heldout"]["perplexity"] > 1.0


@pytest.mark.slow
def test_micro_preset_learns_the_corpora(micro_target: Path) -> None:
    summary = json.loads((micro_target / "jfbench_toy.json").read_text())
    heldout = summary["heldout"]
    assert heldout["perplexity"] < heldout["uniform_perplexity"] / 10
    tokenizer = AutoTokenizer.from_pretrained(micro_target)
    model = AutoModelForCausalLM.from_pretrained(micro_target)
    prompt = tokenizer(
        "Question: Ann has 5 pens and buys 3 more. How many pens does she have?\nAnswer:", return_tensors="pt"
    )
    text = tokenizer.decode(model.generate(**prompt, max_new_tokens=40)[0, prompt.input_ids.shape[1] :])
    assert text.strip()


@pytest.mark.parametrize(("flags", "native"), [("fpu sse2 avx2 fma", False), ("avx2 avx512f avx512_bf16", True),
                                               ("avx2 amx_bf16 amx_tile", True), (None, False)])
def test_bf16_autocast_only_where_the_cpu_multiplies_bf16_natively(monkeypatch, flags, native) -> None:
    # Bug caught: a preset's bf16 autocast kept on a CPU that emulates bf16 (a deep target's step ~13x slower).
    from jetflow_bench.core import runtime
    from jetflow_bench.toy.train import uses_bf16_autocast

    monkeypatch.setattr(runtime, "cpuinfo_field", lambda name: flags if name == "flags" else None)
    assert uses_bf16_autocast(PRESETS["deep"]) is native
    assert uses_bf16_autocast(NANO) is False  # a preset that does not ask never gets it
