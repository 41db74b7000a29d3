"""The lm-evaluation-harness model ``jfbench``: harness requests decoded by jfbench's engine.

    lm_eval --model jfbench --model_args target=DIR,drafter=jetflow=HEAD,budget=64,batch_size=8 ...

- ``generate_until`` decodes through `jetflow_bench.engine.loop.generate` with the chosen drafter and
  budget, greedily or, with ``temperature`` > 0 (plus ``top_p``, ``top_k``, ``seed``), by lossless
  speculative sampling with one random stream per request (its index in the harness's request
  list, the same in every arm), in batches of requests that share a stop rule: the harness's ``until``
  strings and ``max_gen_toks`` become a `StopRule` (EOS included), so every arm stops at the same
  token, and the text is cut before the first ``until`` string as the harness expects. Speculative
  greedy decoding is lossless, so every drafter must give plain decoding's strings and accuracy.
  Per request it records verify steps, drafted and accepted tokens; ``speculation_stats()``
  derives τ from them (`jetflow_bench.measure.metrics`) and ``stats_path=FILE`` writes them as a side file.
- ``loglikelihood`` / ``loglikelihood_rolling`` score continuations with one batched target
  forward per batch (the same `TargetRunner` forward as prefill), so multiple-choice tasks work.

Importing this module registers the model. It imports ``lm_eval.models`` first: the harness
loads its built-in models only while its registry is empty, so registering ``jfbench`` into an
empty registry would hide ``hf``, ``vllm`` and the rest.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import lm_eval.models  # noqa: F401  (built-in harness models first; see the module docstring)
import pandas as pd
import torch
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window
from tqdm import tqdm

from drafters import DRAFTERS, Drafter
from jetflow_bench.core.budget_policy import check_budget
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.fingerprint import model_fingerprint
from jetflow_bench.engine import loop as engine
from jetflow_bench.engine.attention import DEFAULT_ATTENTION
from jetflow_bench.engine.sampling import SamplingParams
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.measure.metrics import acceptance_stats
from jetflow_bench.sweep.arm_syntax import parse_drafters
from jetflow_bench.sweep.prompts import encode
from suites import Request

logger = logging.getLogger(__name__)

MODEL_NAME = "jfbench"
DEFAULT_BUDGET = 64  # nodes per verify step with a drafter (root included); plain decoding uses 1
DEFAULT_MAX_GEN_TOKS = 256  # when a task names no max_gen_toks (the harness's own default)


@register_model(MODEL_NAME)
class JfbenchLM(LM):
    """A jfbench target (+ optional drafter) as a harness model; see the module docstring."""

    def __init__(
        self,
        target: str,
        drafter: str | None = None,
        budget: int | None = None,
        batch_size: int | str | None = 8,
        device: str | None = None,
        dtype: str | None = None,
        attention: str = DEFAULT_ATTENTION,
        max_gen_toks: int = DEFAULT_MAX_GEN_TOKS,
        stats_path: str | None = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
        top_k: int = 0,
        seed: int = 0,
        **ignored: Any,  # the harness also passes max_batch_size and the like
    ) -> None:
        super().__init__()
        if device and str(device).startswith("cuda") and not torch.cuda.is_available():
            # The harness CLI passes --device cuda:0 unless told otherwise; its own models fall back too.
            logger.warning("device=%s but no GPU is available: using cpu", device)
            device = "cpu"
        self.target = TargetRunner.load(target, device=device, dtype=dtype, attention=attention)
        self.tokenizer = self.target.tokenizer
        self.drafter_weights: str | None = None  # fingerprint of the drafter's head, if it has one
        self.drafter_spec = "none" if drafter is None or str(drafter).lower() in ("", "none") else str(drafter)
        self.drafter = self._build_drafter(self.drafter_spec)
        self.budget = int(budget) if budget is not None else (DEFAULT_BUDGET if self.drafter else 1)
        check_budget(self.budget)
        if self.drafter is None and self.budget != 1:
            raise JfbenchError(f"budget={self.budget} needs a drafter: plain decoding (drafter=none) uses budget=1")
        self.batch_size = _batch_size(batch_size)
        self.max_gen_toks = int(max_gen_toks)
        self.stats_path = Path(stats_path) if stats_path else None
        self.sampling = SamplingParams(float(temperature), float(top_p), int(top_k), int(seed))
        self._device = self.target.device
        self._step_rows: list[dict[str, Any]] = []  # one per (request, verify step)
        self._request_rows: list[dict[str, Any]] = []  # one per generated request
        ignored.pop("max_batch_size", None)
        if ignored:
            logger.warning("jfbench model: ignoring unknown model args %s", sorted(ignored))

    def _build_drafter(self, spec: str) -> Drafter | None:
        if spec == "none":
            return None
        # The sweep's arm syntax: "ngram", "jetflow=DIR", "eagle[depth=8]=DIR" (one arm).
        arms = parse_drafters(spec, "drafter")
        if len(arms) != 1:
            raise JfbenchError(f"drafter={spec!r} names {len(arms)} drafters: the jfbench model runs one")
        ((name, options, checkpoint),) = arms
        self.drafter_weights = model_fingerprint(checkpoint) if checkpoint else None  # as the sweep names heads
        return DRAFTERS.get(name).build(self.target, checkpoint=checkpoint, **options)

    # ------------------------------------------------------------------------- harness contract
    @property
    def eot_token_id(self) -> int:
        return self.target.eos_token_ids[0]

    @property
    def prefix_token_id(self) -> int:
        """What an empty context is conditioned on: BOS when the tokenizer has one, else EOS."""
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.eot_token_id

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.name_or_path.replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        return getattr(self.tokenizer, "chat_template", None) if chat_template else None

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The same rendering as jfbench's suites (`suites.base.render_chat`): thinking off."""
        return self.tokenizer.apply_chat_template(
            chat_history, tokenize=False, add_generation_prompt=add_generation_prompt, enable_thinking=False
        )

    def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        """Continuations (greedy or sampled, per ``self.sampling``), each cut before its first ``until`` string."""
        parsed = [self._generation_request(r) for r in requests]
        groups: dict[tuple[int, tuple[str, ...]], list[int]] = {}
        for i, request in enumerate(parsed):
            groups.setdefault((request.max_new_tokens, request.stop), []).append(i)
        eos = frozenset(self.target.eos_token_ids)
        texts: list[str] = [""] * len(requests)
        bar = tqdm(total=len(requests), disable=disable_tqdm, desc=f"jfbench generate ({self.drafter_spec})")
        for (max_new, until), members in groups.items():
            stop = StopRule(max_new, eos, until, self.tokenizer.decode)
            for start in range(0, len(members), self.batch_size):
                chunk = members[start : start + self.batch_size]
                prompts = [self._prompt_ids(parsed[i].prompt) for i in chunk]
                result = engine.generate(self.target, prompts, stop, budget=self.budget, drafter=self.drafter,
                                         sampling=self.sampling, request_ids=chunk)
                for res in result.requests:
                    i = chunk[res.request]
                    texts[i] = parsed[i].cut(self.tokenizer.decode(res.output_tokens, skip_special_tokens=True))
                    self.cache_hook.add_partial("generate_until", requests[i].args, texts[i])
                self._record(requests, chunk, result)
                bar.update(len(chunk))
        bar.close()
        self.write_stats()
        return texts

    def loglikelihood(self, requests: list, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """log P(continuation | context) and whether greedy decoding would produce it."""
        pairs = [self._encode_pair(*r.args) for r in requests]
        scores = self._score(pairs, disable_tqdm)
        for request, score in zip(requests, scores, strict=True):
            self.cache_hook.add_partial("loglikelihood", request.args, score)
        return scores

    def loglikelihood_rolling(self, requests: list, disable_tqdm: bool = False) -> list[float]:
        """log P(text) over context-window-sized disjoint windows, conditioned on `prefix_token_id`."""
        windows, owner = [], []
        for i, request in enumerate(requests):
            tokens = self.tokenizer(request.args[0], add_special_tokens=False)["input_ids"]
            rolling = get_rolling_token_windows(tokens, self.prefix_token_id, self.target.context_window, 1)
            for window in map(make_disjoint_window, rolling):
                windows.append(window)
                owner.append(i)
        totals = [0.0] * len(requests)
        for i, (logprob, _) in zip(owner, self._score(windows, disable_tqdm), strict=True):
            totals[i] += logprob
        for request, total in zip(requests, totals, strict=True):
            self.cache_hook.add_partial("loglikelihood_rolling", request.args, total)
        return totals

    # ------------------------------------------------------------------------- speculation stats
    def speculation_stats(self) -> dict[str, Any]:
        """Per task and per request: verify steps, drafted / accepted tokens and τ (bonus included)."""
        tasks: list[dict[str, Any]] = []
        requests = [dict(row) for row in self._request_rows]
        if self._step_rows:
            steps = pd.DataFrame(self._step_rows)
            new_tokens = pd.DataFrame(requests).groupby("task")["new_tokens"].agg(["size", "sum"])
            for row in acceptance_stats(steps, ["task"], max_depth=0).itertuples(index=False):
                tasks.append({
                    "task": row.task, "requests": int(new_tokens.loc[row.task, "size"]),
                    "new_tokens": int(new_tokens.loc[row.task, "sum"]), "steps": int(row.n_steps),
                    "drafted": int(row.drafted), "accepted": int(row.accepted), "tau": float(row.tau),
                    "accepted_per_step": float(row.accepted_per_step), "tau_per_draft": _float(row.tau_per_draft),
                    "alpha": _float(row.alpha),
                })
            per_request = acceptance_stats(steps, ["task", "doc_id"], max_depth=0).set_index(["task", "doc_id"])
            for row in requests:
                key = (row["task"], row["doc_id"])
                row["tau"] = float(per_request.loc[key, "tau"]) if key in per_request.index else None
        return {"model": self.describe(), "tasks": tasks, "requests": requests}

    def write_stats(self) -> None:
        if self.stats_path is not None:
            self.stats_path.parent.mkdir(parents=True, exist_ok=True)
            self.stats_path.write_text(json.dumps(self.speculation_stats(), indent=1) + "\n")

    def describe(self) -> dict[str, Any]:
        return {
            "model": MODEL_NAME, "target": self.target.name, "drafter": self.drafter_spec,
            "drafter_weights": self.drafter_weights, "budget": self.budget,
            "batch_size": self.batch_size, "device": str(self.target.device), "dtype": str(self.target.dtype),
            "attention": self.target.attention_backend, **self.sampling.describe(),
        }

    def get_model_info(self) -> dict[str, Any]:
        return {"jfbench": self.describe()}

    # ------------------------------------------------------------------------- internals
    def _generation_request(self, request) -> Request:
        context, gen_kwargs = request.args
        kwargs = dict(gen_kwargs or {})
        task_samples = kwargs.pop("do_sample", False) or float(kwargs.pop("temperature", 0.0) or 0.0) > 0
        if task_samples and self.sampling.greedy:
            raise JfbenchError(
                f"task {request.task_name!r} asks for sampling: the jfbench model samples only at the "
                "temperature it is given (jfbench eval --temperature T, model arg temperature=T), else "
                "set do_sample=false / temperature=0 in --gen_kwargs"
            )
        # A model temperature > 0 (with its top-p / top-k) applies to every task, whatever the task's
        # gen_kwargs say: one sampling setting per run, as in jfbench's sweeps.
        until = kwargs.pop("until", None) or ()
        until = (until,) if isinstance(until, str) else tuple(until)
        max_new = int(kwargs.pop("max_gen_toks", self.max_gen_toks))
        return Request(str(request.task_name), str(request.doc_id), context, max_new, until)

    def _prompt_ids(self, prompt: str) -> list[int]:
        """Prompt ids exactly as jfbench's own runs encode them; only an over-long prompt is cut (left)."""
        ids = encode(self.target, prompt)
        if len(ids) > self.target.context_window:
            logger.warning("a prompt of %d tokens is cut to the context window (%d)", len(ids), self.target.context_window)
            ids = ids[-self.target.context_window :]
        return ids

    def _encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """(context ids, continuation ids); a context's trailing spaces move to the continuation."""
        stripped = context.rstrip(" ")
        continuation = context[len(stripped) :] + continuation
        if not stripped:
            return [self.prefix_token_id], self.tokenizer(continuation, add_special_tokens=False)["input_ids"]
        whole = encode(self.target, stripped + continuation)
        context_ids = encode(self.target, stripped)
        return context_ids, whole[len(context_ids) :]

    @torch.inference_mode()
    def _score(self, pairs: Sequence[tuple[list[int], list[int]]], disable_tqdm: bool) -> list[tuple[float, bool]]:
        """One batched target forward per ``batch_size`` pairs: the chain context + continuation[:-1]."""
        window = self.target.context_window
        scores: list[tuple[float, bool]] = []
        for start in tqdm(range(0, len(pairs), self.batch_size), disable=disable_tqdm, desc="jfbench loglikelihood"):
            chunk = pairs[start : start + self.batch_size]
            chains = [(ctx + cont)[-(window + 1) :][:-1] for ctx, cont in chunk]  # left-truncated to the window
            out = self.target.score(chains)  # one forward, no cache kept
            for row, ((_, cont), chain) in enumerate(zip(chunk, chains, strict=True)):
                logits = out.logits[row, len(chain) - len(cont) : len(chain)]  # (n_cont, V): predicts cont
                logprobs = torch.log_softmax(logits.float(), dim=-1)
                wanted = torch.tensor(cont, device=logprobs.device)
                total = logprobs.gather(1, wanted[:, None]).sum().item()
                scores.append((float(total), bool((logits.argmax(-1) == wanted).all())))
        return scores

    def _record(self, requests: list, chunk: list[int], result: engine.BatchResult) -> None:
        """Keep raw per-step counters; τ and the rest are derived in `speculation_stats`."""
        for step in result.steps:
            request = requests[chunk[step.request]]
            self._step_rows.append({"task": str(request.task_name), "doc_id": request.doc_id, **asdict(step)})
        for res in result.requests:
            request = requests[chunk[res.request]]
            mine = [r for r in result.steps if r.request == res.request]
            self._request_rows.append({
                "task": str(request.task_name), "doc_id": request.doc_id, "prompt_tokens": len(res.prompt_tokens),
                "new_tokens": len(res.output_tokens), "finish_reason": res.finish_reason, "steps": res.steps,
                "drafted": sum(r.drafted for r in mine), "accepted": sum(r.accepted for r in mine),
            })


def _batch_size(value: int | str | None) -> int:
    """The harness passes ``--batch_size`` through as given (``"8"``, ``8`` or ``"auto"``)."""
    if value is None:
        return 8
    try:
        size = int(value)
    except (TypeError, ValueError):
        raise JfbenchError(f"batch_size={value!r}: the jfbench model needs an integer batch size, e.g. 8") from None
    if size < 1:
        raise JfbenchError(f"batch_size={size} must be at least 1")
    return size


def _float(value: Any) -> float | None:
    return None if pd.isna(value) else float(value)
