"""Suites: prompt formatting for chat and plain tokenizers, generation lengths, MT-Bench second turns."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from jetflow_bench.core.errors import JfbenchError
from suites import Record, Request, get_suite
from suites.math_suites import BOXED_INSTRUCTION

# Renders like Qwen3: an empty think block when thinking is disabled.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>"
    "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}{% endif %}"
)


def make_tokenizer(chat: bool) -> PreTrainedTokenizerFast:
    backend = Tokenizer(models.WordLevel({"[UNK]": 0, "<|end|>": 1}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", eos_token="<|end|>")
    if chat:
        tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


GSM8K = Record(
    "gsm8k", "0", {"question": "Tom has 2 apples and buys 3. How many?", "answer": "2+3=5\n#### 5"}
)
MT = Record(
    "mt_bench", "81", {"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Shorter."]}
)
HUMANEVAL = Record(
    "humaneval", "HumanEval/0", {"prompt": 'def f(x):\n    """Double x."""\n', "entry_point": "f"}
)
MBPP = Record(
    "mbpp", "2", {"text": "Write a function f.", "test_list": ["assert f(1) == 2", "assert f(2) == 4"]}
)


def test_chat_prompt_goes_through_the_template_with_thinking_disabled() -> None:
    prompt = get_suite("gsm8k").format_prompt(GSM8K, make_tokenizer(chat=True))
    expected_user = f"{GSM8K.fields['question']}\n{BOXED_INSTRUCTION}"
    assert prompt == f"<|user|>{expected_user}<|end|>\n<|assistant|><think></think>"


@pytest.mark.parametrize("chat", [False, True])
def test_every_suite_formats_for_chat_and_plain_tokenizers(chat: bool) -> None:
    tokenizer = make_tokenizer(chat)
    for suite, record, plain in [
        (get_suite("gsm8k"), GSM8K, f"Question: {GSM8K.fields['question']}\nAnswer:"),
        (get_suite("math500"), Record("math500", "a", {"problem": "1+1?"}), "Problem: 1+1?\nSolution:"),
        (get_suite("humaneval"), HUMANEVAL, HUMANEVAL.fields["prompt"]),
        (get_suite("mbpp"), MBPP, '"""\nWrite a function f.\nassert f(1) == 2\nassert f(2) == 4\n"""\n'),
        (get_suite("livecodebench"), Record("livecodebench", "x", {"prompt": "Solve."}), "Solve.```python\n"),
        (get_suite("mt_bench"), MT, "User: Write a poem.\nAssistant:"),
    ]:
        prompt = suite.format_prompt(record, tokenizer)
        if chat:
            assert prompt.startswith("<|user|>") and prompt.endswith("<|assistant|><think></think>"), (
                suite.name
            )
        else:
            assert prompt == plain, suite.name
            assert prompt == suite.format_prompt(record, None), suite.name  # no tokenizer = plain


def test_code_chat_prompts_ask_for_a_code_block() -> None:
    tokenizer = make_tokenizer(chat=True)
    assert "```python\ndef f(x):" in get_suite("humaneval").format_prompt(HUMANEVAL, tokenizer)
    mbpp = get_suite("mbpp").format_prompt(MBPP, tokenizer)
    assert "Write a function f." in mbpp and "assert f(2) == 4" in mbpp and "```python" in mbpp


def test_requests_carry_prompt_length_and_stops() -> None:
    plain, chat = make_tokenizer(chat=False), make_tokenizer(chat=True)
    suite = get_suite("gsm8k")
    (request,) = suite.requests([GSM8K], plain)
    assert request == Request("gsm8k", "0", suite.format_prompt(GSM8K, plain), 512, ("\nQuestion:",), 1)
    assert suite.requests([GSM8K], chat)[0].stop == ()
    assert suite.requests([GSM8K], plain, max_new_tokens=64)[0].max_new_tokens == 64
    with pytest.raises(JfbenchError, match="--max-new-tokens 0"):
        suite.requests([GSM8K], plain, max_new_tokens=0)


@pytest.mark.parametrize(
    ("name", "tokens"),
    [("gsm8k", 512), ("math500", 512), ("aime25", 1024), ("aime24", 1024), ("humaneval", 512), ("mbpp", 512)]
    + [("mbpp-sanitized", 512), ("livecodebench", 512), ("mt_bench", 512)],
)
def test_default_generation_lengths(name: str, tokens: int) -> None:
    assert get_suite(name).default_max_new_tokens == tokens


def test_request_cut_stops_at_the_earliest_stop_string() -> None:
    request = Request("humaneval", "0", "p", 8, ("\ndef", "\nif"), 1)
    assert request.cut("    return x\nif __name__:\ndef g") == "    return x"
    assert request.cut("    return x\n") == "    return x\n"


@pytest.mark.parametrize("chat", [False, True])
def test_mt_bench_second_turn_has_the_first_answer_in_its_history(chat: bool) -> None:
    tokenizer = make_tokenizer(chat)
    one_turn, two_turns = get_suite("mt-bench"), get_suite("mt_bench", turns=2)
    assert one_turn.next_turn(MT, ["Roses are red."], tokenizer) is None
    second = two_turns.next_turn(MT, ["Roses are red."], tokenizer, max_new_tokens=32)
    assert second is not None and (second.turn, second.record_id, second.max_new_tokens) == (2, "81", 32)
    if chat:
        assert second.prompt == (
            "<|user|>Write a poem.<|end|>\n<|assistant|>Roses are red.<|end|>\n<|user|>Shorter.<|end|>\n"
            "<|assistant|><think></think>"
        )
    else:
        assert second.prompt == "User: Write a poem.\nAssistant: Roses are red.\nUser: Shorter.\nAssistant:"
    assert two_turns.next_turn(MT, ["a", "b"], tokenizer) is None
    with pytest.raises(JfbenchError, match="turns=3"):
        get_suite("mt_bench", turns=3)
