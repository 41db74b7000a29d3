"""Write a random-weight EAGLE-3 head in SpecForge's layout for the target folder TARGET into OUT.

Usage (from the repository root): python results/baselines/vllm-heads/make_eagle3_head.py TARGET OUT

The head has the target's sizes (vocabulary, hidden size, heads and head_dim: vLLM's CPU attention
refuses head_dim 16), aux layers 1, 2, 3 (the outputs of layers 0, 1, 2), drafts from half the vocabulary through d2t, and is untrained: it checks that both
engines load the same EAGLE-3 folder and stay lossless, not what a trained head accepts.
"""

import json
import sys
from pathlib import Path

from tests.helpers.eagle3_heads import write_specforge_head

target, out = Path(sys.argv[1]), Path(sys.argv[2])
config = json.loads((target / "config.json").read_text())
shape = {"vocab": config["vocab_size"], "hidden": config["hidden_size"], "heads": config["num_attention_heads"],
         "kv_heads": config["num_key_value_heads"], "head_dim": config["head_dim"], "inner": config["intermediate_size"]}
write_specforge_head(out, draft_vocab=config["vocab_size"] // 2, aux=(1, 2, 3), seed=0, shape=shape)
print(out)
