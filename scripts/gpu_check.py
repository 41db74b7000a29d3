"""The one prepared GPU run (scripts/gpu_check.sh wraps it): every part writes into one folder.

Parts, each with its own time limit and log, in this order (about 20 minutes of limits in all: more
than one 15-minute lease, so a lease runs a `--parts` selection; the first H200 run's timings are in
results/baselines/gpu-h200-2026-12-04):

  preflight     Python packages, the checkout, CUDA, the deep target, its heads and the prompts
  kernels       Triton / flex tree-attention tests on CUDA, then `bench kernels` (bf16) against SDPA
  calibrate     verify-cost calibrations (N = 1/4/16/64/256, batch 1/4/8, bf16) of models built from
                their configs with random weights (timing needs shapes, not weights): Qwen3-8B, and
                each --shapes folder's config.json (e.g. SmolLM2-135M, to price the real-target runs).
                `jfbench project RUN --target-config qwen3-8b --calibration verify-cost-qwen3-8b.json`
  compile-8b    eager vs compiled AR step and verify (N = 1/16/64/256, bf16) on the Qwen3-8B shape
  compile-deep  `jfbench bench compile` on the deep target (forwards at batch 1 and 8, AR decodes)
  baseline      `jfbench bench baseline` vs transformers generate, eager and --compile
  sweep         ngram, jetflow, dflash, eagle on deep, B = 16/64/256, batch 1 and 8, --strict
  projection    `bench verify-cost` on this GPU, then `jfbench project` of the sweep with that
                calibration and with the device's nominal profile, beside the measured speed-ups

The machine reaches no registry: nothing is installed, the checkout runs through PYTHONPATH. A
missing piece stops the run in the preflight; a part over its limit is killed and marked FAIL.
``--dry-run`` (on a CPU) runs every part up to its first CUDA call: CLI parts must stop with the
"asked for a GPU" error, the 8B part builds its config and stops before allocating weights.
``--rehearse`` (on a CPU) runs every part to its end on the CPU in float32, with the 8B config shrunk
to two small layers, short decodes and few prompts: it catches what fails past the first CUDA call,
which a dry run cannot see, before a lent GPU's minutes are spent on it. Its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JFBENCH = [sys.executable, "-c", "import sys; sys.argv[0] = 'jfbench'; from jetflow_bench.cli import main; main()"]
PACKAGES = ("torch", "transformers", "triton", "typer", "rich", "pandas", "pyarrow", "scipy", "matplotlib")
HEADS = ("jetflow", "dflash", "eagle")
NO_GPU = "asked for a GPU but none is available"  # jetflow_bench.runtime.resolve_device's error
DRY_RUN_SLACK = 10  # a dry run's or rehearsal's limits are this many times the GPU's: a loaded 2-core CPU is slow
LIMITS = {"preflight": 20, "kernels": 180, "calibrate": 60, "compile-8b": 300, "compile-deep": 180, "baseline": 120, "sweep": 300,
          "projection": 60}
PARTS = tuple(part for part in LIMITS if part != "preflight")
# Qwen3-8B's published config.json (the fields that set the shapes and the attention)
QWEN3_8B = dict(vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                num_attention_heads=32, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)
# the rehearsal's stand-in: the same config with two small layers (the code path, not the cost)
QWEN3_8B_SHRUNK = {**QWEN3_8B, "vocab_size": 1024, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                   "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}


class Check:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.out = args, Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.status: dict[str, tuple[str, float]] = {}
        self.start = time.perf_counter()
        self.env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                    "HF_HUB_OFFLINE": "1", "JFBENCH_DATA_DIR": str(args.data_dir), "JFBENCH_TEST_DEVICE": "cuda",
                    "OMP_WAIT_POLICY": "PASSIVE",
                    "TORCH_LOGS": "perf_hints"}  # the logs then say when and why CUDA graphs were skipped
        self.env.pop("TRITON_INTERPRET", None)  # compiled kernels, not the interpreter
        if args.rehearse:
            self.env.update(TRITON_INTERPRET="1", JFBENCH_TEST_DEVICE="cpu")  # a CPU runs Triton interpreted

    def run(self, part: str, commands: list[list[str]]) -> None:
        """Run a part's commands in order under its time limit. In a dry run a command passes when it
        succeeds (it needed no GPU) and the part ends at the first one that stops at the GPU check."""
        if part not in self.args.parts:
            return
        began, log = time.perf_counter(), self.out / f"{part}.log"
        limit = LIMITS[part] * (DRY_RUN_SLACK if self.args.on_cpu else 1)
        status = "ok"
        with log.open("w") as sink:
            for command in commands:
                left = limit - (time.perf_counter() - began)
                sink.write(f"$ {' '.join(command)}\n")
                sink.flush()
                try:
                    done = subprocess.run(command, cwd=ROOT, env=self.env, stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True, timeout=max(left, 1))
                except subprocess.TimeoutExpired as err:
                    sink.write((err.stdout or b"").decode() if isinstance(err.stdout, bytes) else (err.stdout or ""))
                    status = f"FAIL (over its {limit} s limit)"
                    break
                sink.write(done.stdout)
                if self.args.dry_run and done.returncode == 2 and NO_GPU in done.stdout:
                    status = "dry-run ok (stopped at the first CUDA call)"
                    break  # later commands of the part need this one's output
                if done.returncode:
                    status = f"FAIL (exit {done.returncode})"
                    break
        seconds = time.perf_counter() - began
        self.status[part] = (status, seconds)
        print(f"[{time.perf_counter() - self.start:6.1f} s] {part}: {status}, {seconds:.1f} s, log {log}", flush=True)

    def python(self, code: str, *argv: str) -> list[str]:
        return [sys.executable, "-c", code, *argv]


def preflight(args: argparse.Namespace) -> list[str]:
    """Everything the parts need, checked before any of them starts; returns the problems."""
    problems = []
    for name in PACKAGES:
        try:
            importlib.import_module(name)
        except ImportError as err:
            problems.append(f"package {name} is missing ({err})")
    deep, heads, data = Path(args.deep), Path(args.heads), Path(args.data_dir)
    if not (deep / "config.json").is_file():
        problems.append(f"--deep {deep}: no config.json (the deep toy target folder, carried with the checkout)")
    problems += [f"--heads {heads}: no {name}/config.json" for name in HEADS if not (heads / name / "config.json").is_file()]
    if not data.is_dir():
        problems.append(f"--data-dir {data} is not a folder (it needs the GSM8K prompts)")
    if not args.on_cpu:
        import torch

        if not torch.cuda.is_available():
            problems.append("no CUDA device visible")
        elif torch.cuda.mem_get_info()[0] < 40 << 30:
            problems.append(f"only {torch.cuda.mem_get_info()[0] >> 30} GiB free on the GPU: the 8B part needs 40")
    return problems


# The in-process snippets' device: argv[2] is the mode; a dry run stops at its first CUDA call
DEVICE = """
import sys
from jetflow_bench.errors import JfbenchError
from jetflow_bench.runtime import resolve_device
device = 'cpu' if sys.argv[2] == 'rehearse' else 'cuda'
try:
    resolve_device(device)  # the first CUDA call: on a CPU (the dry run) the 'asked for a GPU' error
except JfbenchError as err:
    print(f'error: {err}')
    sys.exit(2)
"""


CALIBRATE = DEVICE + """
import json, torch
from pathlib import Path
from transformers import AutoConfig, AutoModelForCausalLM
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.projection.measure import measure
from jetflow_bench.projection.shapes import shape_from_config
from jetflow_bench.projection.verify_cost import write_calibration
shapes, mode, out = json.loads(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
# context 171: the SmolLM2 runs' committed tokens per sequence (mean prompt + half the new tokens)
sizes, batches, repeats = ([1, 4], [1, 2], 3) if mode == 'rehearse' else ([1, 4, 16, 64, 256], [1, 4, 8], 10)
for name, fields in shapes.items():
    config = AutoConfig.for_model(**fields)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16 if device == 'cuda' else torch.float32)
    runner = TargetRunner(model, None, name)
    write_calibration(out / f'verify-cost-{name}.json', measure(runner, shape_from_config(config.to_dict(), name),
                                                                sizes, batches, 171, repeats))
    print(f'{name}: calibration written', flush=True)
    del model, runner
    if device == 'cuda':
        torch.cuda.empty_cache()  # the 8B model's memory back before the next shape and part
"""


EIGHT_B = """
import json, sys, torch
from transformers import Qwen3Config, Qwen3ForCausalLM
from jetflow_bench.bench_compile import DecodeArm, compare_decodes, compare_forwards
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
config = Qwen3Config(**json.loads(sys.argv[1]))
print('config ok: layers', config.num_hidden_layers, 'hidden', config.hidden_size, 'vocab', config.vocab_size)
""" + DEVICE + """
with torch.device(device):
    model = Qwen3ForCausalLM(config).to(torch.bfloat16)
eager = TargetRunner(model, None, 'qwen3-8b-random')
compiled = TargetRunner(model, None, 'qwen3-8b-random', compile=True)
forwards, fc = compare_forwards(eager, compiled, [1, 16, 64, 256], [1], context=1024, repeats=10)
prompts = torch.randint(0, config.vocab_size, (1, 512)).tolist()
decodes, dc, _ = compare_decodes(eager, compiled, prompts, StopRule(64), [DecodeArm('ar', 1, None, None)], pairs=3)
rows = [{'kind': 'forward', **vars(f), 'speedup': f.speedup} for f in forwards]
rows += [{'kind': 'decode', **vars(d), 'speedup': d.speedup} for d in decodes]
print(json.dumps({'compile_s': fc + dc, 'rows': rows}, indent=1))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deep", default=os.environ.get("GPU_CHECK_DEEP", "gpu-carry/deep"), help="deep toy target folder")
    parser.add_argument("--heads", default=os.environ.get("GPU_CHECK_HEADS", "gpu-carry/heads"),
                        help="folder with the deep target's jetflow/, dflash/ and eagle/ heads")
    parser.add_argument("--data-dir", default=os.environ.get("JFBENCH_DATA_DIR", "gpu-carry/data"),
                        help="benchmark data folder (GSM8K prompts)")
    parser.add_argument("--shapes", default=os.environ.get("GPU_CHECK_SHAPES", "gpu-carry/shapes"),
                        help="folder of folders holding a config.json each: their shapes are calibrated too (optional)")
    parser.add_argument("--out", default=os.environ.get("GPU_CHECK_OUT", "results/gpu-check"))
    parser.add_argument("--dry-run", action="store_true", help="on a CPU: every part up to its first CUDA call")
    parser.add_argument("--rehearse", action="store_true",
                        help="on a CPU: every part to its end on the CPU, shrunk (catches what a dry run cannot)")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated parts to run (default all: {','.join(PARTS)}); a rerun of those that failed")
    args = parser.parse_args()
    args.on_cpu = args.dry_run or args.rehearse
    args.parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    for name in ("deep", "heads", "data_dir", "shapes"):
        setattr(args, name, str(Path(getattr(args, name)).resolve()))
    check = Check(args)
    out, deep, heads = check.out, args.deep, args.heads
    began = time.perf_counter()
    problems = preflight(args)
    check.status["preflight"] = ("ok" if not problems else "FAIL: " + "; ".join(problems), time.perf_counter() - began)
    print(f"[{time.perf_counter() - check.start:6.1f} s] preflight: {check.status['preflight'][0]}", flush=True)
    if problems:
        return finish(check)
    cuda = ["--device", "cpu", "--dtype", "float32"] if args.rehearse else ["--device", "cuda", "--dtype", "bfloat16"]
    tokens, prompts = ("16", "2") if args.rehearse else ("128", "8")  # new tokens per decode, sweep prompts
    prefix = "64" if args.rehearse else "1024"
    check.run("kernels", [
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", "tests/test_kernels.py",
         "tests/test_kernels_mask.py", *(["--collect-only"] if args.on_cpu else [])],
        [*JFBENCH, "bench", "kernels", *cuda, "--backends", "sdpa,triton,flex", "--tree-sizes", "16,64,256",
         "--prefix-lens", prefix, "--batch-sizes", "1,8", "--format", "json"],
    ])
    mode = "dry" if args.dry_run else "rehearse" if args.rehearse else "run"
    eight_b = QWEN3_8B_SHRUNK if args.rehearse else QWEN3_8B
    shapes = {"qwen3-8b": {"model_type": "qwen3", **eight_b}, **shape_configs(args.shapes)}
    check.run("calibrate", [check.python(CALIBRATE, json.dumps(shapes), mode, str(out))])
    check.run("compile-8b", [check.python(EIGHT_B, json.dumps(eight_b), mode)])
    check.run("compile-deep", [[*JFBENCH, "bench", "compile", "--target", deep, *cuda, "--sizes", "16,64,256",
                                "--batch-sizes", "1,8", "--max-new-tokens", tokens, "--format", "json"]])
    baseline = [*JFBENCH, "bench", "baseline", "--target", deep, *cuda, "--batch-sizes", "1,8", "--pairs", "3",
                "--max-new-tokens", tokens, "--format", "json"]
    check.run("baseline", [baseline, [*baseline, "--compile"]])
    drafters = ",".join(["ngram", *(f"{name}={heads}/{name}" for name in HEADS)])
    check.run("sweep", [[*JFBENCH, "sweep", "--target", deep, "--drafters", drafters, "--suites", "gsm8k",
                         "--budgets", "16,64,256", "--batch-sizes", "1,8", "--limit", prompts, "--max-new-tokens", tokens,
                         "--repeats", "1", *cuda, "--strict", "--force", "--no-progress", "--out", str(out / "sweep")]])
    hardware = "h200" if "H200" in gpu_name(args.on_cpu) else "h100-sxm"
    check.run("projection", [
        [*JFBENCH, "bench", "verify-cost", "--target", deep, *cuda, "--sizes", "1,16,64,256", "--batch-sizes", "1,8",
         "--repeats", "10", "--out", str(out / "verify-cost.json")],
        [*JFBENCH, "project", str(out / "sweep"), "--calibration", str(out / "verify-cost.json"), "--batch-sizes", "1,8",
         "--out", str(out / "projection-measured"), "--format", "markdown"],
        [*JFBENCH, "project", str(out / "sweep"), "--hardware", hardware, "--batch-sizes", "1,8",
         "--out", str(out / "projection-nominal"), "--format", "markdown"],
        [*JFBENCH, "show", str(out / "sweep"), "--format", "markdown"],  # the measured speed-ups
    ])
    return finish(check)


def shape_configs(folder: str) -> dict[str, dict]:
    """{name: config.json fields} for each model folder under `folder` (none when it does not exist)."""
    files = sorted(Path(folder).glob("*/config.json"))
    return {file.parent.name: json.loads(file.read_text()) for file in files}


def gpu_name(on_cpu: bool) -> str:
    if on_cpu:
        return ""
    import torch

    return torch.cuda.get_device_name()


def finish(check: Check) -> int:
    lines = ["| part | status | seconds |", "|---|---|---|"]
    lines += [f"| {part} | {status} | {seconds:.1f} |" for part, (status, seconds) in check.status.items()]
    lines.append(f"\n{time.perf_counter() - check.start:.0f} s in all; mode: {'dry run' if check.args.dry_run else 'CPU rehearsal' if check.args.rehearse else 'GPU'}")
    (check.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(s.startswith(("ok", "dry-run ok")) for s, _ in check.status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
