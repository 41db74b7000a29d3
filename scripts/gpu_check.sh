#!/usr/bin/env bash
# The one prepared GPU run (one H100/H200, under 8 minutes including setup); every part writes into
# one folder. The parts, their limits and what each measures: scripts/gpu_check.py's docstring.
#
# The GPU machine reaches no registry: nothing is installed; the checkout runs through PYTHONPATH
# with the machine's own torch, transformers, triton, typer, rich, pandas, pyarrow, scipy, matplotlib.
# Carry the deep target, its heads and the GSM8K prompts with the checkout (default gpu-carry/).
#
# Usage: scripts/gpu_check.sh [--deep DIR] [--heads DIR] [--data-dir DIR] [--out DIR] [--dry-run]
#   --dry-run (on a CPU): every part up to its first CUDA call.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" scripts/gpu_check.py "$@"
