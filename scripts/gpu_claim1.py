"""Claim 1 in a short GPU window: the matched dflash / jetflow pair on the `deep` toy target.

One script, one output folder, sized for a 15-minute lease with its start-up (issue 52, item 6).
Inputs, small enough to carry with the checkout (about 50 MB): the deep target folder, its
regenerated training token ids (a ``train_data/regen-*.json`` file of the jfbench cache, written on
a CPU by the same recipe) and the benchmark data folder (GSM8K's prompts, and the training corpora
the training prompts are drawn from). Steps, each logged as ``OUT/<step>.log``:

  adopt      the carried continuations become this machine's training data: nothing is decoded
             again (`jetflow_bench.training.data.adopt_regenerated`; refused if the prompts differ)
  calibrate  a short dflash run times one training step here, and sets the steps both heads train
             for: as many as fit in --train-minutes (at most --max-steps), the same for both
  train      dflash and jetflow heads with today's default recipes (all-mask blocks: they differ in
             the in-block mask alone), the same data, seed and steps; --time-limit as a safety net
  tau        one sweep of both heads on GSM8K: B = 16 / 64 / 256, 64 prompts x 256 new tokens,
             every prompt in one batch, --strict; `jfbench show` of it as tau.md

``--rehearse`` (on a CPU) runs every step to its end on the CPU in float32, shrunk (few steps,
prompts and tokens): its numbers mean nothing, it proves the script before a GPU's minutes are
spent on it (tests/bench/test_gpu_claim1.py). scripts/gpu_check.py can run it as one of its parts.

    # here, on the CPU: copy the deep target, its regen file and the data into gpu-carry/ (<= 64 MiB)
    python scripts/gpu_claim1.py --prepare --deep ~/.cache/jfbench/targets/deep-seed0-...
    # on the GPU machine (carry gpu-carry):
    python scripts/gpu_claim1.py --out results/gpu-claim1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JFBENCH = [sys.executable, "-c", "import sys; sys.argv[0] = 'jfbench'; from jetflow_bench.cli import main; main()"]
HEADS = ("dflash", "jetflow")
LIMITS = {"adopt": 60, "calibrate": 90, "train": 600, "tau": 240}  # seconds on the GPU
REHEARSAL_SLACK = 10  # a loaded 2-core CPU is slow
CARRY_LIMIT = 64 << 20  # what a GPU lease carries beside the checkout
DATA = ("gsm8k", "mbpp", "sharegpt_chat")  # GSM8K's prompts and the training corpora

ADOPT = """
import sys
from pathlib import Path
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.training.config import train_config
from jetflow_bench.training.data import adopt_regenerated
deep, device, dtype, prompts, tokens, seed, source = sys.argv[1:]
target = TargetRunner.load(deep, device, dtype)
config = train_config('dflash', prompts=int(prompts), max_new_tokens=int(tokens), data_seed=int(seed))
print('adopted as', adopt_regenerated(target, config, None, Path(source)))
"""


class Window:
    """Runs the steps in order, each under its time limit, logging into the output folder."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.out = args, Path(args.out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.status: dict[str, tuple[str, float]] = {}
        self.start = time.perf_counter()
        self.env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                    "HF_HUB_OFFLINE": "1", "JFBENCH_DATA_DIR": str(args.data_dir), "OMP_WAIT_POLICY": "PASSIVE"}

    def run(self, step: str, commands: list[list[str]]) -> bool:
        """Run ``commands`` in order under the step's limit; False (and the rest skipped) on a failure."""
        if any(not s.startswith("ok") for s, _ in self.status.values()):
            return False
        began, log = time.perf_counter(), self.out / f"{step}.log"
        limit = LIMITS[step] * (REHEARSAL_SLACK if self.args.rehearse else 1)
        status = "ok"
        with log.open("a") as sink:
            for command in commands:
                sink.write(f"$ {' '.join(command)}\n")
                sink.flush()
                try:
                    done = subprocess.run(command, cwd=ROOT, env=self.env, stdout=sink, stderr=subprocess.STDOUT,
                                          timeout=max(limit - (time.perf_counter() - began), 1))
                except subprocess.TimeoutExpired:
                    status = f"FAIL (over its {limit} s limit)"
                    break
                if done.returncode:
                    status = f"FAIL (exit {done.returncode})"
                    break
        seconds = time.perf_counter() - began
        self.status[step] = (status, seconds)
        print(f"[{time.perf_counter() - self.start:6.1f} s] {step}: {status}, {seconds:.1f} s, log {log}", flush=True)
        return status == "ok"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deep", default="gpu-carry/deep", help="the deep toy target folder")
    parser.add_argument("--train-data", default="gpu-carry/regen-deep.json",
                        help="the deep target's regenerated training data (a jfbench cache train_data/regen-*.json)")
    parser.add_argument("--data-dir", default=os.environ.get("JFBENCH_DATA_DIR", "gpu-carry/data"),
                        help="benchmark data folder: GSM8K and the training corpora")
    parser.add_argument("--out", default="results/gpu-claim1")
    parser.add_argument("--prompts", type=int, default=512, help="training prompts the regen file was made with")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="its continuation length")
    parser.add_argument("--data-seed", type=int, default=0, help="its prompt draw")
    parser.add_argument("--seed", type=int, default=0, help="the heads' initialisation seed")
    parser.add_argument("--train-minutes", type=float, default=3.5, help="training time per head")
    parser.add_argument("--max-steps", type=int, default=12_000, help="at most this many steps (the CPU heads: 600)")
    parser.add_argument("--limit", type=int, default=64, help="GSM8K prompts the tau sweep decodes")
    parser.add_argument("--rehearse", action="store_true", help="on a CPU: every step, shrunk, in float32")
    parser.add_argument("--prepare", action="store_true",
                        help="on the CPU: copy --deep, its regen file (this recipe's) and --data-dir's data into --carry")
    parser.add_argument("--carry", default=str(ROOT / "gpu-carry"), help="the folder --prepare fills")
    args = parser.parse_args()
    if args.prepare:
        return prepare(args)
    for name in ("deep", "train_data", "data_dir", "out"):
        setattr(args, name, str(Path(getattr(args, name)).resolve()))
    missing = [f"{flag} {path}" for flag, path in (("--deep", Path(args.deep) / "config.json"),
                                                   ("--train-data", Path(args.train_data)),
                                                   ("--data-dir", Path(args.data_dir) / "gsm8k"))
               if not path.exists()]
    if missing:
        sys.exit(f"error: missing {', '.join(missing)}: carry the deep target, its regen file and the data folder")
    window = Window(args)
    out = window.out
    device = ["--device", "cpu", "--dtype", "float32"] if args.rehearse else ["--device", "cuda", "--dtype", "bfloat16"]
    tokens, calibration_steps = ("16", 4) if args.rehearse else ("256", 30)
    data = ["--prompts", str(args.prompts), "--max-new-tokens", str(args.max_new_tokens),
            "--data-seed", str(args.data_seed), "--seed", str(args.seed)]
    window.run("adopt", [[sys.executable, "-c", ADOPT, args.deep, device[1], device[3], str(args.prompts),
                          str(args.max_new_tokens), str(args.data_seed), args.train_data]])
    train = [*JFBENCH, "train", "--target", args.deep, *device, *data]
    calibration = out / "calibrate"
    window.run("calibrate", [[*train, "--drafter", "dflash", "--steps", str(calibration_steps),
                              "--eval-every", str(calibration_steps), "--out", str(calibration)]])
    steps = matched_steps(calibration, args)
    window.run("train", [[*train, "--drafter", name, "--steps", str(steps), "--time-limit", f"{args.train_minutes * 1.5:g}",
                          "--out", str(out / "heads" / name)] for name in HEADS])
    arms = ",".join(f"{name}={out / 'heads' / name}" for name in HEADS)
    sweep = out / "tau"
    window.run("tau", [
        [*JFBENCH, "sweep", "--target", args.deep, "--drafters", arms, "--suites", "gsm8k", "--budgets", "16,64,256",
         "--batch-sizes", str(args.limit), "--limit", str(args.limit), "--max-new-tokens", tokens, "--repeats", "1",
         *device, "--strict", "--force", "--no-progress", "--out", str(sweep)],
    ])
    if window.status.get("tau", ("",))[0] == "ok":
        show = [*JFBENCH, "show", str(sweep), "--format", "markdown", "--columns", "budget,tau,alpha,a_1,p_2,p_3,diverged"]
        with (out / "tau.md").open("w") as table:
            subprocess.run(show, cwd=ROOT, env=window.env, stdout=table, check=False)
    return finish(window, steps)


def prepare(args: argparse.Namespace) -> int:
    """Fill --carry (gpu-carry/: where --deep, --train-data and --data-dir point by default) from this
    machine's cache and data folder; fails when it outgrows what a lease carries."""
    from jetflow_bench.engine.target import TargetRunner
    from jetflow_bench.training.config import train_config
    from jetflow_bench.training.data import regen_entry

    carry = Path(args.carry)
    target = TargetRunner.load(args.deep, "cpu", None)
    config = train_config("dflash", prompts=args.prompts, max_new_tokens=args.max_new_tokens, data_seed=args.data_seed)
    regen = regen_entry(target, config, args.data_dir)[2]
    if not regen.is_file():
        sys.exit(f"error: no regen file for this recipe ({regen}): train a head on it first, e.g. jfbench train "
                 f"--drafter dflash --target {args.deep} --prompts {args.prompts} --max-new-tokens {args.max_new_tokens} "
                 f"--data-seed {args.data_seed} --steps 1 --out /tmp/regen-only")
    shutil.rmtree(carry, ignore_errors=True)
    shutil.copytree(args.deep, carry / "deep")
    shutil.copy(regen, carry / "regen-deep.json")
    for name in DATA:
        shutil.copytree(Path(args.data_dir) / name, carry / "data" / name)
    size = sum(f.stat().st_size for f in carry.rglob("*") if f.is_file())
    print(f"{carry}: {size / 2**20:.1f} MiB")
    return 0 if size <= CARRY_LIMIT else 1


def matched_steps(calibration: Path, args: argparse.Namespace) -> int:
    """Steps both heads train for: as many as the calibration's step time fits into --train-minutes
    (4 when rehearsing), capped at --max-steps; 0 when the calibration did not finish."""
    try:
        record = json.loads((calibration / "config.json").read_text())["training"]
    except (OSError, json.JSONDecodeError, KeyError):
        return 0
    if args.rehearse:
        return 4
    return max(1, min(args.max_steps, math.floor(args.train_minutes * 60 / record["step_seconds_mean"])))


def finish(window: Window, steps: int) -> int:
    lines = ["| step | status | seconds |", "|---|---|---|"]
    lines += [f"| {step} | {status} | {seconds:.1f} |" for step, (status, seconds) in window.status.items()]
    mode = "CPU rehearsal (numbers mean nothing)" if window.args.rehearse else "GPU"
    lines.append(f"\n{time.perf_counter() - window.start:.0f} s in all; mode: {mode}; both heads trained {steps} steps")
    (window.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    ok = len(window.status) == len(LIMITS) and all(s.startswith("ok") for s, _ in window.status.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
