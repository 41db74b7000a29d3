"""`jfbench eval`: the harness's ``simple_evaluate`` on the ``jfbench`` model, into a run folder.

A run folder holds one sub-folder per arm (``speculative`` for the drafter, ``plain`` for plain
decoding: with ``--compare-plain`` or ``--drafter none``),
each with the harness's own results JSON (``results.json``), its per-sample log
(``samples_<task>.jsonl``) and the model's speculation side file (``speculation.json``), plus
``eval.json``: the command, the settings and the side-by-side table that the CLI prints.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.registry import did_you_mean
from jetflow_bench.integrations.lm_eval_tasks import CODE_SUITES, TASK_DIR, task_name
from jetflow_bench.integrations.lm_eval_tasks import SUITES as HARNESS_SUITES

PLAIN = ("none", 1)  # (drafter, budget) of plain decoding


@dataclass(frozen=True)
class EvalConfig:
    target: str
    drafter: str  # "jetflow=DIR", "ngram", ...
    budget: int | None  # None: the model's default (64 with a drafter)
    tasks: tuple[str, ...]  # jfbench suite names (-> their harness tasks) or other harness task names
    data_dir: Path
    limit: int | None = None
    batch_size: int = 8
    device: str | None = None
    dtype: str | None = None
    attention: str = "sdpa"
    max_gen_toks: int | None = None  # None: each task's own
    confirm_run_unsafe_code: bool = False
    compare_plain: bool = False
    temperature: float = 0.0  # > 0: speculative sampling (top_p, top_k, seed as in `SamplingParams`)
    top_p: float = 1.0
    top_k: int = 0
    seed: int = 0


def require_lm_eval() -> None:
    try:
        import lm_eval  # noqa: F401
    except ImportError as err:
        raise JfbenchError(
            "lm-eval is not installed: install the eval extra, pip install -e '.[eval]' "
            "(or pip install 'jetflow-bench[eval]')"
        ) from err


def check_data_dir(data_dir: Path | None) -> Path:
    if data_dir is None:
        raise JfbenchError("no data folder: pass --data-dir DIR or set JFBENCH_DATA_DIR (layout: docs/methodology.md, Data)")
    if not data_dir.is_dir():
        raise JfbenchError(f"--data-dir {data_dir} does not exist: pass the folder with the benchmark data files")
    return data_dir


def uses_chat_template(target: str) -> bool:
    """Whether jfbench's suites would prompt ``target`` through its chat template."""
    from transformers import AutoTokenizer

    from suites.base import has_chat_template

    try:
        return has_chat_template(AutoTokenizer.from_pretrained(target))
    except (OSError, ValueError) as err:
        raise JfbenchError(f"cannot load the tokenizer of target {target!r}: pass a local model folder or hub id") from err


def harness_suite(name: str) -> str | None:
    """The canonical jfbench suite ``name`` refers to, when that suite has a harness task."""
    from suites import SUITES

    return SUITES.canonical(name) if name in SUITES and SUITES.canonical(name) in HARNESS_SUITES else None


def check_suite_tasks(names: Sequence[str], data_dir: Path, unsafe_ok: bool) -> list[str]:
    """Check the names that are jfbench suites (a harness task and its data file); return the others."""
    from suites import SUITES, get_suite

    others = []
    for name in names:
        suite = harness_suite(name)
        if suite in CODE_SUITES and not unsafe_ok:
            raise JfbenchError(
                f"--tasks {name}: this task executes model-written code (in jfbench's sandbox); "
                "pass --confirm-run-unsafe-code to allow it"
            )
        if suite is not None:
            local = get_suite(suite).data.local
            if not (data_dir / local).is_file():
                raise JfbenchError(f"--tasks {name}: {data_dir / local} does not exist; check --data-dir")
        elif name in SUITES:
            raise JfbenchError(
                f"unknown task {name!r}: suite {SUITES.canonical(name)!r} has no harness task; "
                f"use one of {', '.join(HARNESS_SUITES)}"
            )
        else:
            others.append(name)
    return others


def check_harness_tasks(names: Sequence[str], known: Sequence[str]) -> None:
    for name in names:
        if name not in known:
            hint = did_you_mean(name, [*HARNESS_SUITES, *known])
            raise JfbenchError(
                f"unknown task {name!r}: {hint}use a jfbench suite with a harness task "
                f"({', '.join(HARNESS_SUITES)}) or a task the harness knows"
            )


def harness_tasks(names: Sequence[str], chat: bool) -> list[str]:
    """jfbench suite names -> their harness tasks (chat or plain variant); other names stay."""
    tasks = [name if harness_suite(name) is None else task_name(harness_suite(name), chat) for name in names]
    return list(dict.fromkeys(tasks))


def run_eval(config: EvalConfig, out: Path, command: Sequence[str]) -> dict[str, Any]:
    """Run the speculative arm (and plain decoding with ``compare_plain``); returns ``eval.json``."""
    require_lm_eval()
    from lm_eval.tasks import TaskManager

    import jetflow_bench.integrations.lm_eval  # noqa: F401  (registers the `jfbench` model)

    data_dir = check_data_dir(config.data_dir)
    others = check_suite_tasks(config.tasks, data_dir, config.confirm_run_unsafe_code)
    # Index the harness's own tasks only when asked for one: that takes seconds.
    manager = TaskManager(include_path=str(TASK_DIR), include_defaults=bool(others), metadata={"data_dir": str(data_dir)})
    check_harness_tasks(others, manager.all_tasks)
    chat = uses_chat_template(config.target)
    tasks = harness_tasks(config.tasks, chat)
    arms = {"speculative": (config.drafter, config.budget)} if config.drafter != PLAIN[0] else {}
    if config.compare_plain or not arms:
        arms["plain"] = PLAIN
    results = {arm: _run_arm(config, out / arm, drafter, budget, tasks, chat, manager)
               for arm, (drafter, budget) in arms.items()}
    summary = {
        "command": list(command), "config": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(config).items()},
        "tasks": tasks, "chat_template": chat, "budget": next(iter(results.values()))["stats"]["model"]["budget"],
        "rows": comparison_rows(results),
    }
    (out / "eval.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _run_arm(
    config: EvalConfig, folder: Path, drafter: str, budget: int, tasks: list[str], chat: bool, manager
) -> dict[str, Any]:
    from lm_eval import simple_evaluate
    from lm_eval.utils import handle_non_serializable

    folder.mkdir(parents=True, exist_ok=True)
    model_args = {
        "target": config.target, "drafter": drafter, "budget": budget, "batch_size": config.batch_size,
        "device": config.device, "dtype": config.dtype, "attention": config.attention,
        "stats_path": str(folder / "speculation.json"),
        "temperature": config.temperature, "top_p": config.top_p, "top_k": config.top_k, "seed": config.seed,
    }
    results = simple_evaluate(
        model="jfbench", model_args={k: v for k, v in model_args.items() if v is not None}, tasks=tasks,
        task_manager=manager, limit=config.limit, log_samples=True, apply_chat_template=chat,
        gen_kwargs=None if config.max_gen_toks is None else {"max_gen_toks": config.max_gen_toks},
        confirm_run_unsafe_code=config.confirm_run_unsafe_code, bootstrap_iters=1000,
    )
    samples = results.pop("samples", {})
    (folder / "results.json").write_text(json.dumps(results, indent=1, default=handle_non_serializable) + "\n")
    for task, rows in samples.items():
        with open(folder / f"samples_{task}.jsonl", "w") as f:
            for row in rows:
                f.write(json.dumps(row, default=handle_non_serializable) + "\n")
    stats_file = folder / "speculation.json"  # written by the model after its generate_until
    stats = json.loads(stats_file.read_text()) if stats_file.is_file() else {"tasks": [], "model": {"budget": budget}}
    return {"results": results["results"], "samples": samples, "stats": stats}


def comparison_rows(arms: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (task, metric): the first arm's score and τ; with a plain arm beside it, plain's
    score and how many generations are identical."""
    rows = []
    name, first = next(iter(arms.items()))
    plain = arms.get("plain") if name != "plain" else None
    tau = {t["task"]: t["tau"] for t in first["stats"]["tasks"]}
    for task, metrics in first["results"].items():
        for key, value in metrics.items():
            if not isinstance(value, int | float) or "_stderr" in key or key == "sample_len":
                continue
            stderr_key = key.replace(",", "_stderr,", 1)  # "exact_match,none" -> "exact_match_stderr,none"
            row = {"task": task, "metric": key.split(",")[0], "arm": name, "score": value,
                   "stderr": metrics.get(stderr_key), "tau": tau.get(task)}
            if plain is not None:
                row["plain_score"] = plain["results"][task][key]
                row["plain_stderr"] = plain["results"][task].get(stderr_key)
                same, total = _same_generations(first["samples"].get(task, []), plain["samples"].get(task, []))
                row["same_generations"], row["generations"] = same, total
            rows.append(row)
    return rows


def differs_from_plain(row: dict[str, Any], sampled: bool) -> bool:
    """Greedy: any difference in score or generations (speculative greedy decoding is lossless).
    Sampled: the two scores differ by more than 1.96 standard errors of their difference (the
    outputs are equal in distribution, not per request)."""
    if "plain_score" not in row:
        return False
    if not sampled:
        return row["plain_score"] != row["score"] or row["same_generations"] != row["generations"]
    se = math.hypot(row["stderr"] or 0.0, row.get("plain_stderr") or 0.0)
    return abs(row["score"] - row["plain_score"]) > 1.96 * se


def _same_generations(a: list[dict], b: list[dict]) -> tuple[int, int]:
    by_doc = {row["doc_id"]: row["resps"] for row in b}
    return sum(by_doc.get(row["doc_id"]) == row["resps"] for row in a), len(a)


def default_out() -> Path:
    return Path("results") / f"eval-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
