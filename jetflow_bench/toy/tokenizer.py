"""Byte-level BPE tokenizer for the toy target, wrapped as a Hugging Face fast tokenizer.

Qwen-like choices: byte-level BPE (any text round-trips), digits split one per token (arithmetic
is learnable at this size), no BOS, `<|endoftext|>` as EOS. `<|pad|>` pads batches and `<|mask|>`
is reserved for block drafters that need a mask token.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"
MASK_TOKEN = "<|mask|>"
SPECIAL_TOKENS = (EOS_TOKEN, PAD_TOKEN, MASK_TOKEN)  # ids 0, 1, 2

# The format of chat documents in `corpus.py`, so that `apply_chat_template` prompts match training.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\\n' }}"
    "{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + message['content'] + eos_token }}"
    "{% else %}{{ message['content'] + '\\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)


def train_tokenizer(texts: Iterable[str], vocab_size: int, model_max_length: int) -> PreTrainedTokenizerFast:
    """Learn BPE merges on `texts`; the result may hold fewer than `vocab_size` tokens on a small corpus."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        mask_token=MASK_TOKEN,
        model_max_length=model_max_length,
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )


def encode_segments(tokenizer: PreTrainedTokenizerFast, segments: list[str]) -> list[list[int]]:
    """Token ids of each segment followed by EOS; special-token text inside the corpus stays plain text."""
    backend = tokenizer.backend_tokenizer
    backend.encode_special_tokens = True  # a chat that quotes "<|endoftext|>" must not end the document
    try:
        encodings = backend.encode_batch(segments, add_special_tokens=False)
    finally:
        backend.encode_special_tokens = False
    eos = tokenizer.eos_token_id
    return [enc.ids + [eos] for enc in encodings]
