"""The one prepared GPU run (scripts/gpu_check.sh wraps it): every part writes into one folder.

A lease is 15 minutes of one GPU, start-up included, so the parts come in order of value and one
call with ``--parts`` fits 10 minutes: ``--parts steps`` (about 8 with start-up), then
``--parts baseline,sweep`` or ``--parts kernels`` with what is left. Each part has its own time
limit and log, and prints one summary line as it ends (also in summary.md):

  steps     the AR step (batch 1, the engine-efficiency figure) and verify N = 1/16/64/256 at batch 1
            and 8 of the Qwen3-8B and SmolLM2-135M shapes (random bf16 weights: timing needs shapes,
            not weights), eager vs --graphs vs --compile (regional Inductor), beside the weight-read
            roofline; build times apart (steps.json)
  baseline  `bench baseline` on deep against transformers generate with its static cache (which
            transformers compiles on a GPU), interleaved pairs, our engine eager and --graphs
  sweep     the deep sweep of every arm (AR, ngram, eagle, dflash, jetflow, jetflow-refine) at
            B = 16/64/256, batch 1 and 8, 32 GSM8K prompts, --graphs first, then eager
  kernels   Triton / flex tree-attention tests on CUDA, then `bench kernels` (bf16) against SDPA
  calibrate verify-cost calibrations (N = 1/4/16/64/256, batch 1/4/8, bf16) of the two shapes:
            `jfbench project RUN --target-config qwen3-8b --calibration verify-cost-qwen3-8b.json`
  projection `bench verify-cost` of deep on this GPU, then `jfbench project` of the graphs sweep with
            that calibration and with the device's nominal profile, beside its measured speed-ups

The machine reaches no registry: nothing is installed, the checkout runs through PYTHONPATH. A
missing piece stops the run in the preflight; a part over its limit is killed and marked FAIL.
``--dry-run`` (on a CPU) runs every part up to its first CUDA call: CLI parts must stop with the
"asked for a GPU" error, the steps part builds its configs and stops before allocating weights.
``--rehearse`` (on a CPU) runs every part to its end on the CPU in float32, shrunk (two small
layers per shape, short decodes, few prompts), with --compile and Dynamo switched off standing in
for --graphs (a CPU records no CUDA graph): it catches what fails past the first CUDA call before
a lent GPU's minutes are spent on it. Its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JFBENCH = [sys.executable, "-c", "import sys; sys.argv[0] = 'jfbench'; from jetflow_bench.cli import main; main()"]
PACKAGES = ("torch", "transformers", "triton", "typer", "rich", "pandas", "pyarrow", "scipy", "matplotlib")
HEADS = ("jetflow", "dflash", "eagle")
ARMS = ("ngram", "eagle", "dflash", "jetflow", "jetflow-refine")  # AR is every sweep's baseline
NO_GPU = "asked for a GPU but none is available"  # jetflow_bench.core.runtime.resolve_device's error
DRY_RUN_SLACK = 10  # a dry run's or rehearsal's limits are this many times the GPU's: a loaded 2-core CPU is slow
LIMITS = {"preflight": 20, "steps": 420, "baseline": 150, "sweep": 420, "kernels": 180, "calibrate": 60,
          "projection": 60}  # seconds on the GPU
PARTS = tuple(part for part in LIMITS if part != "preflight")  # in order of value
# Qwen3-8B's and SmolLM2-135M's published config.json (the fields that set the shapes and the attention)
QWEN3_8B = dict(model_type="qwen3", vocab_size=151936, hidden_size=4096, intermediate_size=12288,
                num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                max_position_embeddings=40960, rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=False)
SMOLLM2 = dict(model_type="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
               num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=8192,
               rope_theta=100_000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)
# the rehearsal's stand-ins: the same configs with two small layers (the code path, not the cost)
SHRUNK = dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16)


class Check:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.out = args, Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.status: dict[str, tuple[str, float, str]] = {}  # part -> (status, seconds, summary line)
        self.start = time.perf_counter()
        self.env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                    "HF_HUB_OFFLINE": "1", "JFBENCH_DATA_DIR": str(args.data_dir), "JFBENCH_TEST_DEVICE": "cuda",
                    "OMP_WAIT_POLICY": "PASSIVE"}
        self.env.pop("TRITON_INTERPRET", None)  # compiled kernels, not the interpreter
        if args.rehearse:  # a CPU runs Triton interpreted, and --compile uncompiled stands in for --graphs
            self.env.update(TRITON_INTERPRET="1", JFBENCH_TEST_DEVICE="cpu", TORCHDYNAMO_DISABLE="1")

    def run(self, part: str, commands: list[list[str]], summarise: Callable[[list[str]], str]) -> None:
        """Run a part's commands in order under its time limit, then print its summary line
        (``summarise`` reads the commands' outputs, even those of a part cut short). In a dry run a
        command passes when it succeeds (it needed no GPU) and the part ends at the first one that
        stops at the GPU check."""
        if part not in self.args.parts:
            return
        began, log = time.perf_counter(), self.out / f"{part}.log"
        limit = LIMITS[part] * (DRY_RUN_SLACK if self.args.on_cpu else 1)
        status, outputs = "ok", []
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
                outputs.append(done.stdout)
                if self.args.dry_run and done.returncode == 2 and NO_GPU in done.stdout:
                    status = "dry-run ok (stopped at the first CUDA call)"
                    break  # later commands of the part need this one's output
                if done.returncode:
                    status = f"FAIL (exit {done.returncode})"
                    break
        seconds = time.perf_counter() - began
        try:
            summary = "" if self.args.dry_run else summarise(outputs)
        except (OSError, ValueError, KeyError, IndexError, StopIteration) as err:  # a part cut short leaves partial outputs
            summary = f"no summary ({type(err).__name__}: {err})"
        self.status[part] = (status, seconds, summary)
        print(f"[{time.perf_counter() - self.start:6.1f} s] {part}: {status}, {seconds:.1f} s, log {log}", flush=True)
        if summary:
            print(f"  {part}: {summary}", flush=True)

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
            problems.append(f"only {torch.cuda.mem_get_info()[0] >> 30} GiB free on the GPU: the 8B shape needs 40")
    return problems


# The in-process snippets' device: argv[2] is the mode; a dry run stops at its first CUDA call
DEVICE = """
import sys
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.runtime import resolve_device
device = 'cpu' if sys.argv[2] == 'rehearse' else 'cuda'
try:
    resolve_device(device)  # the first CUDA call: on a CPU (the dry run) the 'asked for a GPU' error
except JfbenchError as err:
    print(f'error: {err}')
    sys.exit(2)
"""


STEPS = """
import json, sys, torch
from pathlib import Path
from transformers import AutoConfig, AutoModelForCausalLM
from jetflow_bench.bench.compile import compare_forwards
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.sweep.efficiency import measure_efficiency
shapes, mode, out = json.loads(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
configs = {name: AutoConfig.for_model(**fields) for name, fields in shapes.items()}
print('configs ok:', ', '.join(f'{n} ({c.num_hidden_layers} layers)' for n, c in configs.items()), flush=True)
""" + DEVICE + """
rehearse = mode == 'rehearse'
sizes, batches, context, repeats = ([1, 16], [1, 2], 64, 3) if rehearse else ([1, 16, 64, 256], [1, 8], 1024, 10)
modes = ['inductor'] if rehearse else ['graphs', 'inductor']  # the cheap build first; a CPU records no CUDA graph
results = {}
for name, config in configs.items():
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config).to(torch.float32 if rehearse else torch.bfloat16)
    eager = TargetRunner(model, None, name)
    results[name] = {'eager': measure_efficiency(eager, context, repeats)}
    for m in modes:  # each mode's forwards paired with eager's, interleaved; its build time apart
        runner = TargetRunner(model, None, name, compile=m)
        forwards, build_s = compare_forwards(eager, runner, sizes, batches, context, repeats)
        results[name][m] = {**measure_efficiency(runner, context, repeats), 'build_s': build_s,
                            'forwards': [vars(f) for f in forwards]}
        (out / 'steps.json').write_text(json.dumps(results, indent=1))  # kept however far the part gets
        print(f'{name} {m}: built in {build_s:.1f} s', flush=True)
        del runner
        if device == 'cuda':
            torch.cuda.empty_cache()
    del model, eager
    if device == 'cuda':
        torch.cuda.empty_cache()  # the 8B model's memory back before the next shape
"""


CALIBRATE = """
import json, sys, torch
from pathlib import Path
from transformers import AutoConfig, AutoModelForCausalLM
""" + DEVICE + """
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
        torch.cuda.empty_cache()
"""


def summarise_steps(out: Path) -> str:
    """Per shape: the AR step of each mode against the roofline, and N = 256 vs N = 1 at batch 1."""
    parts = []
    for name, modes in json.loads((out / "steps.json").read_text()).items():
        roofline = modes["eager"]["roofline_ms"]
        steps = ", ".join(f"{m} {r['plain_step_ms']:.2f} ms ({r['ratio']:.1f}x)" for m, r in modes.items())
        growth = []
        for m in (m for m in modes if m != "eager"):
            at = {(f["batch"], f["tokens"]): f["compiled_ms"] for f in modes[m]["forwards"]}
            top = max(n for b, n in at if b == 1)
            growth.append(f"{m} N={top}/N=1 {at[1, top] / at[1, 1]:.1f}x, built {modes[m]['build_s']:.0f} s")
        parts.append(f"{name} AR step b1 vs roofline {roofline:.2f} ms: {steps}; {'; '.join(growth)}")
    return " | ".join(parts)


def json_rows(text: str) -> list[dict]:
    """The rows a `--format json` command printed (one line), among the warnings and notes of its log."""
    return json.loads(next(line for line in text.splitlines() if line.startswith("[")))


def summarise_baseline(outputs: list[str]) -> str:
    """Ours / HF static-cache tokens/s per batch size, for each of our modes."""
    cells = []
    for label, text in zip(("eager", "graphs"), outputs, strict=False):
        rows = json_rows(text)
        cells += [f"{label} b{r['batch']} {r['ratio ours/transformers [95% CI]']}" for r in rows]
    return "ours/HF static-cache generate: " + ", ".join(cells)


def summarise_sweep(out: Path) -> str:
    """Each arm's best decode speed-up at batch 1 (over budgets), graphs beside eager."""
    import pandas as pd

    best = {}
    for label in ("graphs", "eager"):
        summary = out / f"sweep-{label}" / "summary.csv"
        if summary.is_file():
            frame = pd.read_csv(summary)
            arms = frame[(frame["drafter"] != "ar") & (frame["batch_size"] == 1)]
            best[label] = arms.groupby("drafter")["speedup_decode_micro"].max().to_dict()
    names = sorted({arm for table in best.values() for arm in table})
    return "best decode speed-up at batch 1, graphs / eager: " + ", ".join(
        f"{arm} {best.get('graphs', {}).get(arm, float('nan')):.2f}x / {best.get('eager', {}).get(arm, float('nan')):.2f}x"
        for arm in names)


def summarise_kernels(outputs: list[str]) -> str:
    """The kernel tests' pytest line and the number of `bench kernels` rows."""
    tests = next((line for line in reversed(outputs[0].splitlines()) if " passed" in line or " failed" in line
                  or "collected" in line), "no pytest summary")
    rows = json_rows(outputs[1]) if len(outputs) > 1 else []
    return f"kernel tests: {tests.strip('= ')}; bench kernels: {len(rows)} rows"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deep", default=os.environ.get("GPU_CHECK_DEEP", "gpu-carry/deep"), help="deep toy target folder")
    parser.add_argument("--heads", default=os.environ.get("GPU_CHECK_HEADS", "gpu-carry/heads"),
                        help="folder with the deep target's jetflow/, dflash/ and eagle/ heads")
    parser.add_argument("--data-dir", default=os.environ.get("JFBENCH_DATA_DIR", "gpu-carry/data"),
                        help="benchmark data folder (GSM8K prompts)")
    parser.add_argument("--out", default=os.environ.get("GPU_CHECK_OUT", "results/gpu-check"))
    parser.add_argument("--dry-run", action="store_true", help="on a CPU: every part up to its first CUDA call")
    parser.add_argument("--rehearse", action="store_true",
                        help="on a CPU: every part to its end on the CPU, shrunk (catches what a dry run cannot)")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated parts to run, in order of value (default all: {','.join(PARTS)}); "
                        "one lease fits --parts steps, then baseline,sweep or kernels")
    args = parser.parse_args()
    args.on_cpu = args.dry_run or args.rehearse
    args.parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown:
        parser.error(f"--parts: unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    for name in ("deep", "heads", "data_dir"):
        setattr(args, name, str(Path(getattr(args, name)).resolve()))
    check = Check(args)
    out, deep, heads = check.out, args.deep, args.heads
    began = time.perf_counter()
    problems = preflight(args)
    check.status["preflight"] = ("ok" if not problems else "FAIL: " + "; ".join(problems), time.perf_counter() - began, "")
    print(f"[{time.perf_counter() - check.start:6.1f} s] preflight: {check.status['preflight'][0]}", flush=True)
    if problems:
        return finish(check)
    rehearse = args.rehearse
    device = ["--device", "cpu", "--dtype", "float32"] if rehearse else ["--device", "cuda", "--dtype", "bfloat16"]
    graphs = "--compile" if rehearse else "--graphs"  # the rehearsal's stand-in runs uncompiled (TORCHDYNAMO_DISABLE)
    tokens, prompts = ("8", "2") if rehearse else ("48", "32")  # new tokens per decode, sweep prompts
    mode = "dry" if args.dry_run else "rehearse" if rehearse else "run"
    shapes = {"qwen3-8b": QWEN3_8B, "smollm2-135m": SMOLLM2}
    if rehearse:
        shapes = {name: {**fields, **SHRUNK} for name, fields in shapes.items()}
    check.run("steps", [check.python(STEPS, json.dumps(shapes), mode, str(out))], lambda _: summarise_steps(out))
    baseline = [*JFBENCH, "bench", "baseline", "--target", deep, *device, "--batch-sizes", "1,8", "--pairs", "3",
                "--max-new-tokens", tokens, "--hf-static-cache", "--format", "json"]
    check.run("baseline", [baseline, [*baseline, graphs]], summarise_baseline)
    drafters = ",".join(f"{arm}={heads}/{arm.removesuffix('-refine')}" if arm != "ngram" else arm for arm in ARMS)
    sweep = [*JFBENCH, "sweep", "--target", deep, "--drafters", drafters, "--suites", "gsm8k", "--budgets", "16,64,256",
             "--batch-sizes", "1,8", "--limit", prompts, "--max-new-tokens", tokens, "--repeats", "1", *device,
             "--force", "--no-progress"]
    check.run("sweep", [[*sweep, graphs, "--out", str(out / "sweep-graphs")], [*sweep, "--out", str(out / "sweep-eager")]],
              lambda _: summarise_sweep(out))
    prefix = "64" if rehearse else "1024"
    check.run("kernels", [
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", "tests/engine/test_kernels.py",
         "tests/engine/test_kernels_mask.py", *(["--collect-only"] if args.on_cpu else [])],
        [*JFBENCH, "bench", "kernels", *device, "--backends", "sdpa,triton,flex", "--tree-sizes", "16,64,256",
         "--prefix-lens", prefix, "--batch-sizes", "1,8", "--format", "json"],
    ], summarise_kernels)
    check.run("calibrate", [check.python(CALIBRATE, json.dumps(shapes), mode, str(out))],
              lambda _: "written: " + ", ".join(sorted(p.name for p in out.glob("verify-cost-*.json"))))
    hardware = "h200" if "H200" in gpu_name(args.on_cpu) else "h100-sxm"
    sweep_graphs = str(out / "sweep-graphs")
    check.run("projection", [
        [*JFBENCH, "bench", "verify-cost", "--target", deep, *device, "--sizes", "1,16,64,256", "--batch-sizes", "1,8",
         "--repeats", "10", "--out", str(out / "verify-cost.json")],
        [*JFBENCH, "project", sweep_graphs, "--calibration", str(out / "verify-cost.json"), "--batch-sizes", "1,8",
         "--out", str(out / "projection-measured"), "--format", "markdown"],
        [*JFBENCH, "project", sweep_graphs, "--hardware", hardware, "--batch-sizes", "1,8",
         "--out", str(out / "projection-nominal"), "--format", "markdown"],
    ], lambda outputs: f"{len(outputs)} of 3 commands done (projection-measured/, projection-nominal/)")
    return finish(check)


def gpu_name(on_cpu: bool) -> str:
    if on_cpu:
        return ""
    import torch

    return torch.cuda.get_device_name()


def finish(check: Check) -> int:
    lines = ["| part | status | seconds | summary |", "|---|---|---|---|"]
    lines += [f"| {part} | {status} | {seconds:.1f} | {summary} |" for part, (status, seconds, summary) in check.status.items()]
    lines.append(f"\n{time.perf_counter() - check.start:.0f} s in all; mode: {'dry run' if check.args.dry_run else 'CPU rehearsal' if check.args.rehearse else 'GPU'}")
    (check.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(s.startswith(("ok", "dry-run ok")) for s, _, _ in check.status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
