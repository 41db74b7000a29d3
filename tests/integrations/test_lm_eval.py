"""The lm-eval model `jfbench` and the offline harness tasks, run through the harness itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("lm_eval", reason="the eval extra is not installed: pip install -e '.[dev,eval]'")

import torch  # noqa: E402
from lm_eval import simple_evaluate  # noqa: E402
from lm_eval.api.instance import Instance  # noqa: E402
from lm_eval.tasks import TaskManager  # noqa: E402

from jetflow_bench.engine.target import TargetRunner  # noqa: E402
from jetflow_bench.integrations.lm_eval import JfbenchLM  # noqa: E402
from jetflow_bench.integrations.lm_eval_tasks import CODE_SUITES, SUITES, TASK_DIR, task_name  # noqa: E402
from jetflow_bench.integrations.lm_eval_tasks.suite_tasks import load_docs, process_results  # noqa: E402
from jetflow_bench.sweep.prompts import suite_requests  # noqa: E402
from suites import get_suite  # noqa: E402
from tests.helpers.data_dirs import benchmark_data_dir  # noqa: E402

DATA = benchmark_data_dir()  # the made-up folder where no data folder is given


def manager(**kwargs) -> TaskManager:
    return TaskManager(include_path=str(TASK_DIR), include_defaults=False, metadata={"data_dir": str(DATA)}, **kwargs)


def evaluate(target: Path, tasks: list[str], chat: bool, limit: int, gen_kwargs: dict, **model_args):
    args = {"target": str(target), "device": "cpu", "dtype": "float32", **model_args}
    return simple_evaluate(
        model="jfbench", model_args=args, tasks=tasks, task_manager=manager(), limit=limit, log_samples=True,
        apply_chat_template=chat, gen_kwargs=gen_kwargs, bootstrap_iters=0,
    )


def test_registering_jfbench_keeps_the_harness_models() -> None:
    # Bug: the harness loads its built-ins only into an empty registry, so registering first hid `hf`.
    code = (
        "import sys\n"  # first take out the installed .pth hook: this checks the module's own registration
        "sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != '_Watcher']\n"
        "import jetflow_bench.integrations.lm_eval as m\n"
        "from lm_eval.api.registry import get_model, model_registry\n"
        "assert get_model('jfbench') is m.JfbenchLM\n"
        "print(sorted(k for k in ('hf', 'vllm', 'dummy', 'jfbench') if k in model_registry))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['dummy', 'hf', 'jfbench', 'vllm']"


def test_installed_pth_registers_jfbench_lazily_with_the_harness() -> None:
    # Bug: `python -m lm_eval --model jfbench` fails on lm-eval 0.4.13 (no plug-in discovery)
    # because the wheel lost its .pth hook — or the hook imports torch into every Python process.
    code = (
        "import sys\n"
        "from lm_eval.api.registry import model_registry\n"
        "print('jfbench' in model_registry, 'hf' in model_registry, 'torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "False"], "reinstall: pip install -e '.[dev,eval]'"


@pytest.mark.slow
def test_python_m_lm_eval_runs_the_jfbench_model(micro_target: Path, tmp_path: Path) -> None:
    # Bug: the documented harness command line does not reach the model (registration, model args).
    stats = tmp_path / "speculation.json"
    command = [
        sys.executable, "-m", "lm_eval", "--model", "jfbench",
        "--model_args", f"target={micro_target},drafter=ngram,budget=16,stats_path={stats}", "--batch_size", "4",
        "--include_path", str(TASK_DIR), "--metadata", json.dumps({"data_dir": str(DATA)}),
        "--tasks", "jfbench_gsm8k_chat", "--apply_chat_template", "--limit", "2", "--gen_kwargs", "max_gen_toks=24",
        "--output_path", str(tmp_path / "harness"),
    ]
    out = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert list((tmp_path / "harness").rglob("results_*.json"))
    assert json.loads(stats.read_text())["tasks"][0]["tau"] > 1.0


def test_task_configs_carry_each_suites_stop_rule_and_length() -> None:
    # Bug: a YAML drifts from its suite (other stop strings or length than jfbench's own runs use).
    names = [task_name(s, chat) for s in SUITES for chat in (False, True)]
    tasks = manager().load(names)["tasks"]
    for suite_name in SUITES:
        suite = get_suite(suite_name)
        plain, chat = (tasks[task_name(suite_name, c)].config for c in (False, True))
        assert plain.generation_kwargs["until"] == list(suite.plain_stop)
        assert chat.generation_kwargs["until"] == []  # chat prompts end at the template's EOS
        for config in (plain, chat):
            assert config.generation_kwargs["max_gen_toks"] == suite.default_max_new_tokens
            assert config.generation_kwargs["do_sample"] is False
            assert bool(config.unsafe_code) == (suite_name in CODE_SUITES)


def test_documents_come_from_the_data_folder_and_score_with_the_suites_checker(tmp_path: Path) -> None:
    # Bug: wrong records (hub or another file) or a checker other than the suite's.
    docs = load_docs("gsm8k", data_dir=str(DATA))["test"]
    suite = get_suite("gsm8k")
    records = suite.load(DATA, limit=3).records
    for row, record in zip(docs, records, strict=False):
        assert row["plain_prompt"] == suite.format_prompt(record, None)
        assert row["user_message"] == suite.user_message(record)
        right = f"... so the answer is {suite.reference(record.fields)}."
        assert process_results(row, [right]) == {"exact_match": 1.0}
        assert process_results(row, ["the answer is 123456789"]) == {"exact_match": 0.0}
    assert len(docs) == suite.load(DATA).total
    with pytest.raises(Exception, match="math500/test.jsonl"):
        load_docs("math500", data_dir=str(tmp_path))  # an empty folder: no hub fallback


def test_harness_prompts_equal_jfbench_suite_prompts(micro_target: Path) -> None:
    # Bug: the harness sees another text than jfbench's own runs (a delimiter, a template, the wrong field).
    runner = TargetRunner.load(micro_target, device="cpu")
    for chat in (True, False):  # the toy target has a chat template: chat is what jfbench itself uses
        tasks = [task_name(s, chat) for s in ("gsm8k", "humaneval")]
        out = simple_evaluate(
            model="jfbench", model_args={"target": str(micro_target), "device": "cpu"}, tasks=tasks,
            task_manager=manager(), limit=2, log_samples=True, apply_chat_template=chat,
            gen_kwargs={"max_gen_toks": 2}, predict_only=True, confirm_run_unsafe_code=True,
        )
        for suite_name, task in zip(("gsm8k", "humaneval"), tasks, strict=True):
            suite = get_suite(suite_name)
            if chat:
                expected = suite_requests(runner, suite_name, DATA, limit=2)
            else:
                expected = suite.requests(suite.load(DATA, limit=2), None)
            samples = sorted(out["samples"][task], key=lambda s: s["doc_id"])
            assert [s["arguments"][0][0] for s in samples] == [r.prompt for r in expected]
            assert [s["arguments"][0][1]["until"] for s in samples] == [list(r.stop) for r in expected]


@pytest.mark.slow
def test_generations_and_accuracy_identical_for_every_drafter(micro_target, learned_heads, tmp_path) -> None:  # noqa: F811
    # Bug: speculative decoding changes the harness's strings (an `until` string cut per step instead
    # of per token, lost bonus tokens, batch mix-ups) — or never speculates (τ = 1 passes equality).
    arms = {
        "none": {},
        "ngram": {"drafter": "ngram", "budget": 16},
        "jetflow": {"drafter": f"jetflow={learned_heads['jetflow']}", "budget": 16},
    }
    # The chat task is what jfbench runs on the toy target (it has a chat template). The micro
    # toy rarely emits EOS early, so an `until` string it does write makes some requests stop mid-step:
    # the word of its own first answer that appears there for the first time latest, but within its
    # first three quarters (which words it writes depends on its corpus; a word it writes early, e.g.
    # " of", stops every request within a few tokens, before any draft could be accepted).
    probe = evaluate(micro_target, ["jfbench_gsm8k_chat"], True, 1, {"max_gen_toks": 96}, batch_size=1)
    words = probe["samples"]["jfbench_gsm8k_chat"][0]["resps"][0][0].split()
    first: dict[str, int] = {}
    for i, word in enumerate(words):
        first.setdefault(word, i)
    _, word = max((i, w) for w, i in first.items() if i <= 3 * len(words) // 4)
    gen_kwargs = {"max_gen_toks": 96, "until": [" " + word]}
    runs = {}
    for arm, args in arms.items():
        stats = tmp_path / f"{arm}.json"
        out = evaluate(micro_target, ["jfbench_gsm8k_chat"], True, 8, gen_kwargs, batch_size=4,
                       stats_path=str(stats), **args)
        texts = {s["doc_id"]: s["resps"][0][0] for s in out["samples"]["jfbench_gsm8k_chat"]}  # resps: [[text]]
        runs[arm] = (texts, out["results"]["jfbench_gsm8k_chat"]["exact_match,none"], json.loads(stats.read_text()))
    plain_texts, plain_acc, plain_stats = runs["none"]
    assert len(plain_texts) == 8 and plain_stats["tasks"][0]["tau"] == 1.0
    finish = [r["finish_reason"] for r in plain_stats["requests"]]
    assert "stop" in finish, f"no request ended on the until string ({finish}): the test lost its point"
    assert not any(gen_kwargs["until"][0] in text for text in plain_texts.values())  # cut before the until string
    for arm in ("ngram", "jetflow"):
        texts, acc, stats = runs[arm]
        assert texts == plain_texts, arm
        assert acc == plain_acc, arm
        assert stats["tasks"][0]["tau"] > 1.0, arm
        assert [r["new_tokens"] for r in stats["requests"]] == [r["new_tokens"] for r in plain_stats["requests"]]


@pytest.mark.slow
def test_temperature_reaches_the_engine_with_reproducible_streams(micro_target, tmp_path) -> None:
    # Bug: the model's temperature is dropped (sampled text equals greedy text), the task's greedy
    # gen_kwargs veto it, or streams depend on something other than (seed, request) (reruns differ).
    gen_kwargs = {"max_gen_toks": 24}

    def texts(**args) -> tuple[dict, dict]:
        stats = tmp_path / "stats.json"
        out = evaluate(micro_target, ["jfbench_gsm8k_chat"], True, 4, gen_kwargs, batch_size=2,
                       drafter="ngram", budget=8, stats_path=str(stats), **args)
        return {s["doc_id"]: s["resps"][0][0] for s in out["samples"]["jfbench_gsm8k_chat"]}, json.loads(stats.read_text())

    greedy, _ = texts()
    sampled, stats = texts(temperature=1.0, seed=3)
    again, _ = texts(temperature=1.0, seed=3)
    other, _ = texts(temperature=1.0, seed=4)
    assert stats["model"]["temperature"] == 1.0 and stats["model"]["seed"] == 3
    assert sampled != greedy  # 4 requests x 24 tokens at T = 1 on a flat toy: equal only if T was ignored
    assert again == sampled
    assert other != sampled


MC_TASK = """task: tiny_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
output_type: multiple_choice
test_split: test
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: answer
metric_list:
  - metric: acc
"""
MC_DOCS = [
    {"question": "Question: 2 + 3 =", "choices": ["5", "6", "23"], "answer": 0},
    {"question": "The capital of France is", "choices": ["Paris", "London", "a city", "Rome"], "answer": 0},
    {"question": "Janet has 4 eggs. She eats 1. She has", "choices": ["3 eggs", "5 eggs"], "answer": 0},
    {"question": "def add(a, b):\n    return", "choices": ["a + b", "a - b", "None"], "answer": 0},
]


def direct_logprob(model, context: list[int], continuation: list[int]) -> float:
    """log P(continuation | context) from one plain `transformers` forward, no jfbench code."""
    ids = torch.tensor([context + continuation])
    with torch.no_grad():
        logprobs = model(ids).logits[0].float().log_softmax(-1)  # (T, V)
    return sum(logprobs[len(context) - 1 + k, tok].item() for k, tok in enumerate(continuation))


def test_loglikelihood_equals_a_direct_target_forward(micro_target: Path, tmp_path: Path) -> None:
    # Bug: off-by-one logits, padding of a ragged batch leaking into scores, wrong context/continuation split.
    data = tmp_path / "mc.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in MC_DOCS))
    (tmp_path / "tiny_mc.yaml").write_text(MC_TASK.format(data=data))
    out = simple_evaluate(
        model="jfbench", model_args={"target": str(micro_target), "device": "cpu", "batch_size": 3},
        tasks=["tiny_mc"], task_manager=TaskManager(include_path=str(tmp_path), include_defaults=False),
        log_samples=True, bootstrap_iters=0,
    )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(micro_target)
    model = AutoModelForCausalLM.from_pretrained(micro_target, dtype=torch.float32).eval()
    samples = sorted(out["samples"]["tiny_mc"], key=lambda s: s["doc_id"])
    assert len(samples) == 4
    correct = []
    for sample in samples:
        scores = []
        for (context, continuation), (logprob, _) in zip(sample["arguments"], (r[0] for r in sample["resps"]), strict=True):
            ctx = tokenizer(context)["input_ids"]
            cont = tokenizer(context + continuation)["input_ids"][len(ctx) :]
            reference = direct_logprob(model, ctx, cont)
            assert float(logprob) == pytest.approx(reference, abs=1e-4)
            scores.append(reference)
        correct.append(float(scores.index(max(scores)) == sample["target"]))
    assert out["results"]["tiny_mc"]["acc,none"] == pytest.approx(sum(correct) / len(correct))

    lm = JfbenchLM(target=str(micro_target), device="cpu", batch_size=2)
    texts = ["Question: how many eggs?", "The answer is 42.", "x"]
    rolling = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (t,), 0) for t in texts])
    for text, value in zip(texts, rolling, strict=True):
        tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert value == pytest.approx(direct_logprob(model, [lm.prefix_token_id], tokens), abs=1e-4)
