"""Offline lm-evaluation-harness task configs for jfbench's suites (point ``--include_path`` here).

Each suite has two tasks: ``jfbench_<suite>`` with the suite's plain completion prompt and stop
strings (models without a chat template) and ``jfbench_<suite>_chat`` with the suite's user message,
for ``--apply_chat_template`` (the harness renders it through the model's chat template, as
jfbench's own runs do). Records come from the data folder only — never from the hub: the harness
metadata key ``data_dir`` (``--metadata '{"data_dir": "..."}'``), else ``JFBENCH_DATA_DIR``.
``python -m jetflow_bench.integrations.lm_eval_tasks`` prints this folder.
"""

from __future__ import annotations

from pathlib import Path

TASK_DIR = Path(__file__).resolve().parent
SUITES = ("gsm8k", "math500", "aime25", "humaneval", "mbpp")  # suites with a harness task
CODE_SUITES = ("humaneval", "mbpp")  # their tasks execute model code: unsafe_code, opt-in


def task_name(suite: str, chat: bool) -> str:
    """The harness task for a jfbench suite: ``jfbench_gsm8k`` or ``jfbench_gsm8k_chat``."""
    return f"jfbench_{suite}_chat" if chat else f"jfbench_{suite}"
