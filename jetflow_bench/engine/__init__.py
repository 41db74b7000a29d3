"""The decoding core: everything one speculative step touches, and the meter that records it.

A step reads draft -> verify -> accept -> commit (`loop._speculative_step`); each stage has one
module here, and the step's instruments one of their own (`meter`):

    loop                  the step loop: batches of requests, the AR arm as budget 1; `generate`
                          decodes a batch
    meter                 `StepMeter`: clock stamps, raw counters per step (`StepRecord`), the
                          calibration records and a budget policy's bookkeeping, at named points
    serving               continuous batching: `serve` admits requests arriving over time into the
                          running batch at step boundaries (the same step), stamping every chunk
    target                `TargetRunner`: prefill, plain decoding and tree verification of a
                          Hugging Face causal LM through the preallocated cache
    forwards              a verify's forward behind one interface: eager, or padded to static shapes
    kv_cache              `KVCache`: written in place; committing a path gathers its slots
    compiled              `--compile` / `--graphs`: static shapes (tree buckets, whole-cache
                          attention), one Inductor-built layer reused by every layer, CUDA graphs
    tree                  `DraftTree` and the index arithmetic on trees (padding, ancestor masks)
    attention             attention backends behind one signature (sdpa, flex, triton), selected
                          by name; the kernels themselves live in `jetflow_bench.kernels`
    rope                  the one rotary embedding (target and draft heads)
    acceptance            greedy tree acceptance (target token at the parent == drafted token)
    sampling              `SamplingParams`, per-request random streams, the target's distribution
    speculative_sampling  lossless tree acceptance at temperature > 0 (recursive rejection)
    stopping              stop rules, identical in every arm
    faithfulness          the rank-1 branch's distance from the target's greedy choices (a counter)
    drafter               the port drafters plug into: `Drafter`, `SequenceView`, `DraftCost`, `Dists`

Drafters (`drafters/`) plug in through `drafter.Drafter` and are never imported here; measurement
(`metrics`), sweeps, reports, projection, training and integrations sit above this package and
import from it, never the reverse. This file imports nothing, so importing one engine module stays cheap.
"""
