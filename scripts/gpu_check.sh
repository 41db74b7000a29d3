#!/usr/bin/env bash
# The one prepared GPU run (one H100/H200): parts in order of value, one call with --parts fitting
# 10 minutes of a 15-minute lease including start-up; every part writes into one folder and prints
# its own summary line. The parts, their limits and what each measures: scripts/gpu_check.py's docstring.
#
# The GPU machine reaches no registry: nothing is installed; the checkout runs through PYTHONPATH
# with the machine's own torch, transformers, triton, typer, rich, pandas, pyarrow, scipy, matplotlib.
# Carry the deep target, its heads and the GSM8K prompts with the checkout (default gpu-carry/).
#
# Usage: scripts/gpu_check.sh [--deep DIR] [--heads DIR] [--data-dir DIR] [--out DIR] [--parts LIST]
#                             [--dry-run | --rehearse]
#   --dry-run (on a CPU): every part up to its first CUDA call.
#   --rehearse (on a CPU): every part to its end, shrunk; run it before spending a lease.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" scripts/gpu_check.py "$@"
