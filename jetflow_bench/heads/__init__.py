"""The learned draft head shared by the learned drafter families and by head training.

    head        `DraftHead` / `HeadConfig`: fused target features -> a few decoder layers -> the
                target's own LM head, with its own small KV cache of context keys/values
    masks       the head's attention masks (causal / bidirectional blocks, trees over a context)
    checkpoint  reading and writing a head directory (weights + config.json), the default taps

The families (`drafters/eagle/drafter.py`, `dflash.py`, `jetflow.py`) decide how the head drafts; training
(`jetflow_bench.training`) shapes and saves it. Neither owns it, so it sits below both.
"""
