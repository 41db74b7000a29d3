"""`jfbench sweep` / `jfbench ablate`: run a grid of cells and keep tidy, resumable results.

Run-folder layout (``--out RUN``; plots, reports and regression checks read these names):

    RUN/
      manifest.json      command line, resolved config + config_hash, run_id, versions, torch
                         threads, device, git commit (+ dirty flag), seeds, data sources, started /
                         finished times, and one entry per session (a resumed run has several);
                         under --executor ray, `workers`: each worker process (host, Ray node,
                         device, versions, git commit) with the cells it ran (`ray_executor`)
      steps.parquet      one row per (verify step, request)
      requests.parquet   one row per request
      cells.parquet      one row per finished cell
      summary.parquet    one row per cell, derived only from the three tables above
      summary.csv        the same
      ablation.parquet   `jfbench ablate` only: one row per variant × suite × budget × batch size
      ablation.csv       the same
      cells/             the source of truth: per cell <cell_id>.steps.parquet,
                         <cell_id>.requests.parquet, <cell_id>.json (written last = finished;
                         under --executor ray it names its worker: host, pid, device);
                         the tables above are rebuilt from it after finished cells (as often as
                         costs at most ~10% of the run) and always when the run ends
      partial/           a running cell's decoded prompt batches, so a killed cell resumes at its
                         next batch (`journal`); removed once the cell is stored
      heads/             each arm's head record (its checkpoint's config.json, named by
                         `core.arms.head_record_file`), so the run says how its heads were trained
      .lock              held while a sweep writes the folder (pid + host inside)

Cell keys (first columns of every table): suite, drafter, variant, budget, batch_size, repeat,
temperature, load ("" without a serving load).
The AR baseline is drafter `AR_ARM` (jetflow_bench.core.arms), variant "default", budget 1.

steps:    run_id, <cell keys>, request, step, batch_step, active, drafted, accepted (kept after the
          stop rule), accepted_raw (before it), emitted, depth, draft_passes, draft_entries,
          draft_flops, verify_flops, draft_s, verify_s, other_s, rank1_len, rank1_gap (the
          top-ranked branch's length and gap, jetflow_bench.engine.faithfulness; the three times belong to the
          whole batched forward `batch_step`, repeated on each of its rows; `budget` is the
          cell's B, root included)
requests: run_id, <cell keys>, request, record_id, prompt, prompt_hash, prompt_tokens (count),
          output_ids, output, new_tokens, finish_reason, ttft_s, decode_s, steps, drafted,
          accepted, accepted_raw, emitted (sums of the step rows), tau (= emitted / steps), lossless, excused, first_divergence (index into the generated tokens,
          NA when lossless), tie_gap, correct (NA when the suite does not score), config_hash,
          session and batch_started (the session and start of the request's timed batch),
          base_decode_s, base_ttft_s (its baseline arm's times in the same round), aa_decode_s,
          aa_ttft_s (the AR baseline's A/A copy in that round; all NaN in a --tau-only run);
          load cells add sent_s, e2el_s, tpot_s, itl_s (`measure.serving`), their base_* come
          from plain decoding's serving run at the same load in the same session, with no A/A copy
cells:    run_id, <cell keys>, cell_id, config_hash, engine, n_requests, wall_s, peak_mem_bytes,
          drafted_mean, drafted_max, budget_fill, started, finished, baseline (the arm its
          speed-ups divide by: AR, or vllm:none for vLLM arms), session (the one that stored it),
          pairing ("interleaved", or "tau-only"), base_wall_s (load cells: the wall time of
          the plain-decoding serving run they are paired with)
summary:  <cell keys>, then `jetflow_bench.measure.metrics.summarize`'s columns (tau, accepted_per_step,
          tau_per_draft, alpha, draft_passes, draft_entries, draft_flops, verify_flops,
          budget_efficiency, a_1..a_D, p_1..p_D, accept_hist, rank1_faithful, tokens_per_s, tpot_s, ttft_s,
          other_share, speedup_{decode,e2e}_{micro,macro}{,_lo,_hi}, accuracy, baseline_accuracy,
          lossless_unexcused, lossless_excused, ...), then drafted_mean, drafted_max,
          budget_fill, peak_mem_bytes, engine (hf, or "vllm <version>"), baseline, config_hash,
          session, pairing, the arm's pooled speed-up (speedup_arm{,_lo,_hi}, speedup_repeats,
          speedup_sessions), the A/A noise floor at its batch size (noise_aa{,_lo,_hi},
          noise_rounds), speedup_distinct (its CI clear of that floor) and speedup_note (why a
          cell has no speed-up; "" when it has one)
ablation: see `jetflow_bench.sweep.ablation`.

`request` is the prompt's position in its suite's selected records, so it pairs arms, batch
sizes and repeats. Speed-ups divide by the baseline timed in the same round of the same
session (`base_*`), never by a cell timed in another session. `peak_mem_bytes` is the device peak on GPUs and the process's resident high-water mark
on CPU (monotonic over a run there).
"""
