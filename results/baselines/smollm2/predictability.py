"""How predictable a target is, from one sweep run: a target that repeats itself inflates every τ.

    python predictability.py RUN_FOLDER --target NAME_OR_FOLDER

Reads RUN_FOLDER/requests.parquet and summary.csv (a sweep with the AR baseline and an `ngram` arm at
temperature 0) and prints, over the AR outputs:
  - the mean next-token entropy of the target (nats) at the positions it generated, teacher-forced on
    its own greedy output (low entropy = easy to draft),
  - the distinct-4-gram ratio (distinct 4-grams / all 4-grams over every output),
  - the ngram arm's τ per budget (a drafter with no training at all).
"""

import argparse
from pathlib import Path

import pandas as pd
import torch

from jetflow_bench.engine.target import TargetRunner

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("run", type=Path)
parser.add_argument("--target", required=True)
args = parser.parse_args()

requests = pd.read_parquet(args.run / "requests.parquet")
ar = requests[(requests["drafter"] == "ar") & (requests["temperature"] == 0.0)].drop_duplicates("request")
runner = TargetRunner.load(args.target)
model = runner.model
entropies = []
with torch.no_grad():
    for row in ar.itertuples():
        prompt = runner.tokenizer(row.prompt, add_special_tokens=False)["input_ids"]  # as the suites encode it
        assert len(prompt) == row.prompt_tokens, "prompt text does not re-encode to the tokens the run used"
        output = list(row.output_ids)
        logits = model(torch.tensor([prompt + output])).logits[0, len(prompt) - 1 : -1]  # (T_out, V)
        logp = torch.log_softmax(logits.float(), dim=-1)
        entropies.append(-(logp.exp() * logp).sum(-1))  # (T_out,)
entropy = torch.cat(entropies)
grams = [tuple(ids[i : i + 4]) for ids in ar["output_ids"] for i in range(len(ids) - 3)]
print(f"{len(ar)} AR outputs, {entropy.numel()} generated tokens")
print(f"mean next-token entropy {entropy.mean():.3f} nats (median {entropy.median():.3f})")
print(f"distinct-4-gram ratio {len(set(grams)) / len(grams):.3f} ({len(grams)} 4-grams)")
summary = pd.read_csv(args.run / "summary.csv")
ngram = summary[(summary["drafter"] == "ngram") & (summary["temperature"] == 0.0)]
for row in ngram.sort_values("budget").itertuples():
    print(f"ngram B={row.budget} {row.suite}: tau = {row.tau:.3f}")
