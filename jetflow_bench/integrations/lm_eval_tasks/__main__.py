"""Print the task folder, for ``lm_eval --include_path "$(python -m jetflow_bench.integrations.lm_eval_tasks)"``."""

from jetflow_bench.integrations.lm_eval_tasks import TASK_DIR

print(TASK_DIR)
