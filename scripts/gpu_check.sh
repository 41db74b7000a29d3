#!/usr/bin/env bash
# GPU check of the attention kernels (one CUDA GPU, about 5 minutes). NOT YET RUN ON A GPU: until it
# has passed on a real one, sdpa stays the default backend everywhere (see docs/kernels.md).
#
#   1. environment: a venv that reuses a preinstalled CUDA torch (else installs torch + triton), plus this package;
#   2. the kernel tests compiled on CUDA (tests/test_kernels*.py with JFBENCH_TEST_DEVICE=cuda): fp32, bf16, fp16;
#   3. `jfbench bench kernels` in bf16 (every backend's time and max |error| vs SDPA);
#   4. a micro-target sweep (AR + ngram + a quick JetFlow head) with --attention triton and with --attention sdpa,
#      in fp32 and --strict: both must be lossless and emit the same tokens;
#   5. one summary table (also written to $OUT/summary.md).
#
# Usage: JFBENCH_DATA_DIR=/path/to/benchmark/data scripts/gpu_check.sh
# Env:   GPU_CHECK_OUT (default results/gpu-check), PYTHON (default python3), JFBENCH_CACHE (models are trained here
#        when missing: the micro target and one quick head, about a minute on a GPU machine).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${GPU_CHECK_OUT:-results/gpu-check}"
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 OMP_WAIT_POLICY=PASSIVE JFBENCH_TEST_DEVICE=cuda
: "${JFBENCH_DATA_DIR:?set JFBENCH_DATA_DIR to the benchmark data folder (GSM8K prompts, toy-target corpora)}"
export JFBENCH_DATA_DIR
unset TRITON_INTERPRET  # compiled kernels, not the interpreter
START=$(date +%s)
declare -A STATUS
step() {  # step NAME TIMEOUT_S COMMAND...: run with a time limit, log to $OUT/NAME.log, record ok/FAIL
  local name=$1 limit=$2; shift 2
  echo "== $name (limit ${limit}s)" >&2
  if timeout "$limit" "$@" >"$OUT/$name.log" 2>&1; then STATUS[$name]=ok; else STATUS[$name]="FAIL (exit $?, see $OUT/$name.log)"; fi
  tail -n 3 "$OUT/$name.log" >&2
}

# 1. environment
setup() {
  [ -x .venv-gpu/bin/python ] || "${PYTHON:-python3}" -m venv --system-site-packages .venv-gpu || return 1
  . .venv-gpu/bin/activate
  python -c "import torch; assert torch.cuda.is_available()" 2>/dev/null || pip install -q torch triton || return 1
  pip install -q -e ".[dev]" || return 1
  python -c "import torch, triton; assert torch.cuda.is_available(), 'no CUDA device visible'
print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
}
step setup 150 setup
. .venv-gpu/bin/activate 2>/dev/null || { echo "no environment; see $OUT/setup.log" >&2; exit 1; }

# 2. kernel tests on CUDA (fp32 / bf16 / fp16 are parametrised inside)
step tests 90 python -m pytest -q -p no:cacheprovider -m "not slow" tests/test_kernels.py tests/test_kernels_mask.py

# 3. kernel benchmark (bf16): sdpa and triton on the full grid, flex on two shapes (it compiles per shape)
step bench 90 bash -c "jfbench bench kernels --device cuda --dtype bfloat16 --backends sdpa,triton --format json \
    --tree-sizes 16,64,256 --prefix-lens 128,1024,4096 --batch-sizes 1,8 > '$OUT/bench.json' &&
  jfbench bench kernels --device cuda --dtype bfloat16 --backends sdpa,flex --format json \
    --tree-sizes 64,256 --prefix-lens 1024 --batch-sizes 8 > '$OUT/bench_flex.json'"

# 4. micro-target sweep, triton vs sdpa (fp32: token identity across backends is only well defined there)
sweep() {
  local head
  head=$(python -c "
from jetflow_bench.toy import ensure_toy_target
from jetflow_bench.training import QUICK_RECIPE, ensure_head
target = ensure_toy_target('micro', show_progress=False)
print(target, ensure_head(target, 'jetflow', device='cuda', dtype='float32', show_progress=False, **QUICK_RECIPE))
") || return 1
  set -- $head
  for backend in sdpa triton; do
    jfbench sweep --target "$1" --drafters "ngram,jetflow=$2" --suites gsm8k --budgets 16,64 --limit 4 \
      --max-new-tokens 64 --repeats 1 --device cuda --dtype float32 --attention "$backend" --strict --force \
      --no-progress --out "$OUT/sweep-$backend" || return 1
  done
}
step sweep 150 sweep

# 5. summary
python - "$OUT" "$(( $(date +%s) - START ))" \
  "${STATUS[setup]:-not run}" "${STATUS[tests]:-not run}" "${STATUS[bench]:-not run}" "${STATUS[sweep]:-not run}" <<'EOF'
import json, sys
from pathlib import Path

out, seconds, *status = sys.argv[1:]
out = Path(out)
rows = [("setup", status[0], (out / "setup.log").read_text().strip().splitlines()[-1:] or [""])]
tail = (out / "tests.log").read_text().strip().splitlines()[-1:] if (out / "tests.log").exists() else [""]
rows.append(("kernel tests (cuda; fp32/bf16/fp16)", status[1], tail))
detail = ""
for name in ("bench.json", "bench_flex.json"):
    try:
        report = json.loads((out / name).read_text())
    except (OSError, ValueError):
        continue
    by = {(r["batch"], r["tree"], r["prefix"], r["backend"]): r for r in report}
    for backend in ("triton", "flex"):
        errs = [r["max_err"] for r in report if r["backend"] == backend]
        if errs:
            detail += f"{backend}: max abs err {max(errs):.1e}; "
        key = (8, 256, 4096 if name == "bench.json" else 1024)
        if (*key, backend) in by and (*key, "sdpa") in by:
            detail += f"B8 N256 L{key[2]}: {by[(*key, backend)]['ms']:.3f} ms vs sdpa {by[(*key, 'sdpa')]['ms']:.3f} ms; "
rows.append(("bench kernels (bf16)", status[2], [detail]))
sweep = ""
try:
    import pandas as pd

    frames = {b: pd.read_parquet(out / f"sweep-{b}" / "requests.parquet") for b in ("sdpa", "triton")}
    ids = {b: f.set_index(["drafter", "budget", "request"])["output_ids"].map(list).to_dict() for b, f in frames.items()}
    accepted = int(frames["triton"].query("drafter == 'jetflow'")["accepted"].sum())
    sweep = (f"same tokens triton vs sdpa: {'yes' if ids['triton'] == ids['sdpa'] else 'NO'}; lossless: "
             f"{bool(frames['triton']['lossless'].all())}; jetflow accepted {accepted}")
    if ids["triton"] != ids["sdpa"] or accepted == 0:
        status[3] = "FAIL"
except Exception as err:  # a failed step leaves no tables
    sweep = f"no tables ({type(err).__name__})"
rows.append(("micro sweep triton vs sdpa (fp32)", status[3], [sweep]))
lines = ["| check | result | detail |", "|---|---|---|"] + [f"| {n} | {s} | {' '.join(d)} |" for n, s, d in rows]
lines.append(f"\n{seconds} s in all")
(out / "summary.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(0 if all(s == "ok" for s in status) else 1)
EOF
