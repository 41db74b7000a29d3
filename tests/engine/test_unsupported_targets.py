"""Architectures the engine's layer loop cannot run exactly are refused at load, in one line.

Gemma 3 (the registry also ships Gemma 3 270M) is the case in point: most of its layers attend
through a sliding window, and every block normalises its sublayers' outputs. Decoding it with the
Llama-style loop would give wrong tokens without an error, so both traits must stop the load.
"""

import pytest
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.target import TargetRunner


def _gemma3_folder(tmp_path, layer_types):
    config = Gemma3TextConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=len(layer_types),
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, sliding_window=8, layer_types=layer_types,
    )
    Gemma3ForCausalLM(config).save_pretrained(tmp_path)
    return tmp_path


def _load_error(folder) -> str:
    with pytest.raises(JfbenchError) as info:
        TargetRunner.load(folder, device="cpu")
    return str(info.value)


def test_gemma3_sliding_window_layers_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", lambda *a, **k: None)
    message = _load_error(_gemma3_folder(tmp_path, ["sliding_attention", "full_attention"]))
    assert "sliding-window" in message and "\n" not in message


def test_gemma_sandwich_norms_are_refused_even_without_sliding_windows(tmp_path, monkeypatch):
    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", lambda *a, **k: None)
    message = _load_error(_gemma3_folder(tmp_path, ["full_attention", "full_attention"]))
    assert "sandwich norms" in message and "\n" not in message


@pytest.mark.parametrize(("config_cls", "model_cls"), [("Olmo2Config", "Olmo2ForCausalLM"), ("CohereConfig", "CohereForCausalLM")])
def test_layers_without_the_loops_norms_are_refused_at_load(tmp_path, monkeypatch, config_cls, model_cls):
    """OLMo 2 normalises after each sublayer (no input norm) and Cohere runs attention and MLP in
    parallel off one norm: both have q/k/v/o and RoPE, loaded fine and died in the first forward
    with an AttributeError traceback."""
    import transformers

    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", lambda *a, **k: None)
    config = getattr(transformers, config_cls)(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                               num_attention_heads=2, num_key_value_heads=1)
    getattr(transformers, model_cls)(config).save_pretrained(tmp_path)
    message = _load_error(tmp_path)
    assert "layer" in message and "\n" not in message


def test_a_model_the_layer_loop_does_not_reproduce_is_refused(tmp_path, monkeypatch):
    """Granite passes the structural checks (Llama-style blocks) but scales its residuals and
    logits: only comparing the engine's logits with the model's own can see it."""
    from transformers import GraniteConfig, GraniteForCausalLM

    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", lambda *a, **k: None)
    config = GraniteConfig(
        vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, residual_multiplier=0.3, logits_scaling=4.0, embedding_multiplier=6.0,
    )
    GraniteForCausalLM(config).save_pretrained(tmp_path)
    message = _load_error(tmp_path)
    assert "does not reproduce" in message and "\n" not in message
