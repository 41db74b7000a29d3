"""Draft-head training: config validation, losses, data, resume, caching and the CLI.

Fast tests use a random 2-layer target and a few steps; the learning test uses the micro toy target.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from drafters.block.training import DFLASH_TRAINING, JETFLOW_TRAINING
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.runtime import PORTABLE_CPU_NUMERICS, cpu_vendor, pin_portable_cpu_numerics
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.report.curves import plateau_step
from jetflow_bench.training import data as training_data
from jetflow_bench.training import ensure_head, head_path, train_config, train_drafter
from jetflow_bench.training import loop as training_loop
from jetflow_bench.training.loop import new_head, plateaued
from jetflow_bench.training.losses import depth_weights, distill_loss
from jetflow_bench.training.teacher import TeacherBatch, TeacherCache
from tests.helpers.data_dirs import benchmark_data_dir
from tests.helpers.random_models import save_random_model

ROOT = Path(__file__).resolve().parents[2]
DATA = benchmark_data_dir()  # the made-up training sets where no data folder is given
TINY_RUN = {
    "prompts": 8, "max_new_tokens": 24, "seq_len": 48, "batch_size": 2, "anchors": 3, "block_size": 6, "warmup": 1,
}


def tiny_train_args(drafter: str, target: Path, out: Path) -> list[str]:
    """`jfbench train` arguments for a 2-step head on the random target (the CLI tests add their own)."""
    return ["train", "--drafter", drafter, "--target", str(target), "--out", str(out), "--steps", "2",
            "--prompts", "8", "--max-new-tokens", "24", "--seq-len", "48", "--batch-size", "2", "--anchors", "2",
            "--block-size", "6"]  # fmt: skip


@pytest.fixture(scope="module")
def random_target(tmp_path_factory) -> Path:
    return save_random_model(tmp_path_factory.mktemp("target") / "qwen3")


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("JFBENCH_CACHE", str(tmp_path_factory.getbasetemp() / "jfbench-cache"))


def test_config_validation_names_the_option():
    with pytest.raises(JfbenchError, match="--loss 'kl'"):
        train_config("jetflow", loss="kl")
    with pytest.raises(JfbenchError, match="--head bidirectional: eagle trains causal heads only"):
        train_config("eagle", head="bidirectional")
    with pytest.raises(JfbenchError, match="--corpus"):
        train_config("dflash", corpus=("wikipedia",))
    assert train_config("dflash").mode == "bidirectional"
    diffusion = train_config("jetflow", head="diffusion")  # DFlash's name, accepted on input
    assert diffusion == train_config("jetflow", head="bidirectional") and diffusion.mode == "bidirectional"
    assert train_config("jetflow").mode == "causal"


def test_losses_vanish_when_draft_equals_target_and_order_as_expected():
    torch.manual_seed(0)
    target = torch.randn(5, 11)
    ones = torch.ones(5)
    for kind in ("fkl", "rkl"):
        loss, agree = distill_loss(target.clone(), target, ones, kind)
        assert loss.item() == pytest.approx(0.0, abs=1e-6) and agree.item() == 1.0
    sft, _ = distill_loss(target.clone(), target, ones, "sft")
    assert sft.item() > 0  # cross-entropy keeps the target's own entropy
    far, _ = distill_loss(torch.zeros(5, 11), target, ones, "fkl")
    assert far.item() > 0.1
    assert depth_weights(torch.tensor([1, 2, 8]), 7.0).tolist() == pytest.approx([1.0, math.exp(-1 / 7), math.exp(-1)])
    assert depth_weights(torch.tensor([1, 5]), 0.0).tolist() == [1.0, 1.0]


def test_jetflow_blocks_mix_all_mask_and_real_prefix():
    gen = torch.Generator().manual_seed(0)
    k = JETFLOW_TRAINING.prefix_lengths(train_config("jetflow", options={"layout": "prefix"}), (64, 16), gen)
    assert k.min() == 0 and k.max() <= 14
    assert 0.35 < (k == 0).float().mean() < 0.65
    assert JETFLOW_TRAINING.prefix_lengths(train_config("jetflow"), (4, 4), gen).eq(0).all()  # mask layout
    assert DFLASH_TRAINING.prefix_lengths(train_config("dflash"), (4, 4), gen).eq(0).all()


@pytest.mark.parametrize(("drafter", "head", "layout"), [
    ("jetflow", None, "packed"), ("jetflow", None, "prefix"), ("jetflow", None, "mask"), ("jetflow", "bidirectional", "prefix"),
    ("dflash", None, "prefix"),
])
def test_no_training_query_sees_the_token_it_predicts(drafter, head, layout):
    """A MASK at offset o predicts x_{p+o}: no entry it attends to may hold a real token at offset >= o."""
    config = train_config(drafter, head=head, options={"layout": layout if drafter == "jetflow" else None}, block_size=6)
    groups = config.objective.block_groups(config, config.mode, 2, torch.Generator().manual_seed(0), torch.device("cpu"))
    assert sum(g.count for g in groups) == config.anchors
    for g in groups:
        for mask_row, depth_row in zip(g.is_mask.flatten(0, 1), g.depth.flatten(0, 1), strict=True):
            for j in mask_row.nonzero().flatten().tolist():
                seen = g.allowed[j].clone()
                seen[j] = False
                assert not (seen & ~mask_row & (g.offsets >= g.offsets[j])).any()
                assert depth_row[j] >= 1
    if layout == "packed":  # a prefix_zero share of all-mask blocks for pass 1, the rest packed
        assert [g.count for g in groups] == [8, 8] and groups[1].is_mask.sum(-1).eq(5).all()
    if layout == "mask":  # pass 1's blocks only: the anchor real, every other entry a MASK
        assert len(groups) == 1 and groups[0].is_mask.sum(-1).eq(5).all()


def test_match_depth1_gives_prefix_heads_the_packed_layouts_depth1_queries():
    """Packed, A = 16, D = 15: 8 all-mask blocks (1 depth-1 query each) + 8 packed (15 each) = 128;
    a prefix-layout head has 16 (one per block), so 112 one-mask blocks are added."""
    packed = train_config("jetflow-refine")
    groups = packed.objective.block_groups(packed, "causal", 1, torch.Generator().manual_seed(0), torch.device("cpu"))
    depth1 = sum(int((g.is_mask & (g.depth == 1)).sum()) for g in groups)
    for config in (train_config("dflash", match_depth1=True), train_config("jetflow", layout="prefix", match_depth1=True)):
        assert config.anchors + config.objective.extra_depth1_blocks(config) == depth1 == 128
    assert DFLASH_TRAINING.extra_depth1_blocks(train_config("dflash")) == 0
    with pytest.raises(JfbenchError, match="--match-depth1"):
        train_config("jetflow-refine", match_depth1=True)
    with pytest.raises(JfbenchError, match="--match-depth1 is not a training option of eagle: .*--ttt-steps"):
        train_config("eagle", match_depth1=True)


def test_match_depth1_adds_depth1_supervision(random_target, tmp_path):
    records = {}
    for match in (False, True):
        out = train_drafter(random_target, tmp_path / str(match), data_dir=DATA, show_progress=False, drafter="dflash",
                            steps=1, match_depth1=match, **TINY_RUN)
        records[match] = json.loads((out / "config.json").read_text())["training"]
    # TINY_RUN: A = 3, D = 5 -> packed gives round(1.5) = 2 + 1 x 5 = 7 depth-1 queries; 4 one-mask blocks are added
    assert records[True]["supervised_positions_per_step"] > records[False]["supervised_positions_per_step"]


def test_packed_layout_needs_a_causal_jetflow_head():
    assert train_config("jetflow").setting("layout") == "mask"  # the authors' recipe: pass 1's blocks
    assert train_config("jetflow-refine").setting("layout") == "packed"  # what refinement queries
    assert train_config("jetflow-refine").drafter == "jetflow"  # one family of heads, read by both arms
    # a recorded unset layout is the old default: packed (causal) or prefix (bidirectional), same cache key as before
    assert train_config("jetflow", options={"layout": None}).setting("layout") == "packed"
    assert train_config("jetflow", head="bidirectional", options={"layout": None}).setting("layout") == "prefix"
    assert train_config("dflash").setting("layout") == "mask"
    with pytest.raises(JfbenchError, match="--layout packed needs"):
        train_config("jetflow-refine", head="bidirectional")
    for bad in ({"drafter": "jetflow", "head": "bidirectional"}, {"drafter": "dflash"}):
        with pytest.raises(JfbenchError, match="--layout packed needs"):
            train_config(**bad, options={"layout": "packed"})
    with pytest.raises(JfbenchError, match="--layout 'tree'"):
        train_config("jetflow", options={"layout": "tree"})


def test_training_prompts_are_training_splits_in_suite_format(random_target):
    tokenizer = TargetRunner.load(random_target, device="cpu").tokenizer
    pairs = training_data.training_pairs(("gsm8k", "mbpp"), 6, 0, tokenizer, DATA)
    assert [p.source for p in pairs] == ["gsm8k", "mbpp"] * 3
    assert all(p.prompt.startswith("Question: ") and p.prompt.endswith("\nAnswer:") for p in pairs[::2])
    records = [json.loads(line) for line in (DATA / "mbpp/mbpp.jsonl").read_text().splitlines()]
    mbpp_test_text = next(r["text"] for r in records if r["task_id"] == 11)  # a test-split task
    assert all(mbpp_test_text not in p.prompt for p in pairs)


def test_regen_data_is_cached_on_disk(random_target, monkeypatch):
    target = TargetRunner.load(random_target, device="cpu")
    config = train_config("dflash", **TINY_RUN)
    first = training_data.training_sequences(target, config, DATA, show_progress=False)
    monkeypatch.setattr(training_data, "generate", lambda *a, **k: pytest.fail("regen ran twice"))
    assert training_data.training_sequences(target, config, DATA, show_progress=False) == first
    pairs = training_data.training_pairs(config.corpus, config.prompts, config.seed, target.tokenizer, DATA)
    prompts = [target.tokenizer(p.prompt, add_special_tokens=False)["input_ids"] for p in pairs]
    kept = [p for p in prompts if len(p) <= config.seq_len - config.block_size - 1]
    assert [s.tokens[: s.prompt_len] for s in first] == kept  # each prompt length from the recomputed prompts
    raw = training_data.training_sequences(target, train_config("dflash", data="raw", **TINY_RUN), DATA)
    assert all(s.tokens[-1] in target.eos_token_ids and 0 < s.prompt_len < len(s.tokens) for s in raw)


def test_data_seed_fixes_the_prompt_draw_across_init_seeds(random_target, monkeypatch):
    """--data-seed: seeds 0 and 1 train on one data set (one regeneration) but are different heads."""
    target = TargetRunner.load(random_target, device="cpu")
    runs = [train_config("dflash", seed=s, data_seed=0, **TINY_RUN) for s in (0, 1)]
    first = training_data.training_sequences(target, runs[0], DATA, show_progress=False)
    monkeypatch.setattr(training_data, "generate", lambda *a, **k: pytest.fail("the same prompts regenerated twice"))
    assert training_data.training_sequences(target, runs[1], DATA, show_progress=False) == first
    assert runs[0].key("t") != runs[1].key("t")
    unset = train_config("dflash", seed=1, **TINY_RUN)
    assert unset.prompt_seed == 1 and "data_seed" not in unset.to_dict()  # old heads keep their cache keys
    record = runs[1].to_dict()
    assert train_config(record.pop("drafter"), **record).key("t") == runs[1].key("t")  # a recorded data seed reads back
    with pytest.raises(JfbenchError, match="--data-seed -1"):
        train_config("dflash", data_seed=-1)


def _teacher(lengths: list[int], prompts: list[int]) -> TeacherBatch:
    b, t = len(lengths), max(lengths)
    tokens = torch.zeros(b, t, dtype=torch.long)
    return TeacherBatch(tokens, torch.tensor(lengths), torch.tensor(prompts), torch.zeros(b, t, 1, 2), torch.zeros(b, t, 2),
                        tokens.clone())


def test_training_positions_never_predict_a_prompt_token():
    """Anchors and roots p are drawn where x_{p+1} is continuation: p >= prompt length - 1 (and p >= 1)."""
    batch = _teacher([40, 40, 12, 30], [30, 0, 10, 29])
    picks = batch.random_positions(500, 1, torch.Generator().manual_seed(0))
    assert picks.min(1).values.tolist() == [29, 1, 9, 28]  # every allowed position is drawn
    assert picks.max(1).values.tolist() == [38, 38, 10, 28]  # room for one real token after p
    roots = batch.random_positions(500, 0, torch.Generator().manual_seed(0))
    assert roots.max(1).values.tolist() == [39, 39, 11, 29]


def test_batcher_drops_sequences_without_continuation_and_reports_the_prompt_share():
    samples = [training_data.Sample(list(range(10)), 4), training_data.Sample(list(range(12)), 12),
               training_data.Sample(list(range(30)), 8)]
    batcher = training_data.SequenceBatcher(samples, seq_len=20, min_len=6)
    assert [len(s.tokens) for s in batcher.samples] == [10, 20]  # the all-prompt one is gone, the long one cut
    assert batcher.prompt_share() == pytest.approx(12 / 30)
    assert set(batcher.draw(8, torch.Generator().manual_seed(0))) == {0, 1}
    held = training_data.SequenceBatcher(samples * 5, seq_len=20, min_len=6, heldout=3)  # 10 kept: 2 may be held out
    assert held.heldout_picks() == [8, 9] and held.train_count == 8
    assert max(held.draw(64, torch.Generator().manual_seed(0))) < 8


def test_teacher_features_are_computed_once_and_equal_a_direct_target_forward(random_target, monkeypatch):
    target = TargetRunner.load(random_target, device="cpu")
    samples = training_data.training_sequences(target, train_config("dflash", **TINY_RUN), DATA, show_progress=False)
    cache = TeacherCache.ensure(target, samples, (0, 1), show_progress=False)
    monkeypatch.setattr(target, "score", lambda *a, **k: pytest.fail("the target ran again"))
    again = TeacherCache.ensure(target, samples, (0, 1), show_progress=False)
    assert again.folder == cache.folder
    batch = again.batch([2, 0])
    monkeypatch.undo()
    direct = target.score([samples[2].tokens], taps=(0, 1))
    n = len(samples[2].tokens)
    torch.testing.assert_close(batch.taps[0, :n], direct.hidden[0, :n], atol=1e-5, rtol=1e-5)
    assert batch.argmax[0, :n].tolist() == direct.logits[0, :n].argmax(-1).tolist()
    head = new_head(target, train_config("dflash", **TINY_RUN))
    rows, cols = torch.zeros(n, dtype=torch.long), torch.arange(n)
    torch.testing.assert_close(batch.teacher_logits(head, rows, cols), direct.logits[0, :n], atol=1e-4, rtol=1e-4)
    assert batch.lengths.tolist() == [n, len(samples[0].tokens)]
    assert batch.prompt_lengths.tolist() == [samples[2].prompt_len, samples[0].prompt_len]
    other = TeacherCache.ensure(target, samples, (1,), show_progress=False)  # other taps: another cache
    assert other.folder != cache.folder


def test_draft_vocabulary_is_the_most_frequent_continuation_tokens():
    samples = [training_data.Sample([9, 9, 9, 5, 5, 7, 3], 3), training_data.Sample([9, 2, 2, 7], 1)]
    # continuation counts: 5 x2, 7 x2, 2 x2, 3 x1 (the prompts' 9s do not count); ties by lower id
    assert training_data.frequent_tokens(samples, 3, 12).tolist() == [2, 5, 7]
    assert training_data.frequent_tokens(samples, 6, 12).tolist() == [0, 1, 2, 3, 5, 7]  # unseen ids fill by id
    assert training_data.coverage(samples, torch.tensor([2, 5, 7])) == pytest.approx(6 / 7)
    with pytest.raises(JfbenchError, match="--draft-vocab 12 must be below"):
        training_data.frequent_tokens(samples, 12, 12)


@pytest.mark.parametrize("drafter", ["eagle", "dflash", "jetflow"])
def test_draft_vocabulary_heads_train_and_record_their_tokens(random_target, tmp_path, drafter):
    out = train_drafter(random_target, tmp_path / drafter, data_dir=DATA, show_progress=False, drafter=drafter,
                        steps=2, draft_vocab=6, **TINY_RUN)
    raw = json.loads((out / "config.json").read_text())
    assert raw["draft_vocab_size"] == 6 and raw["training"]["config"]["draft_vocab"] == 6
    assert 0 < raw["training"]["draft_vocab_coverage"] <= 1
    assert math.isfinite(raw["training"]["first_loss"])
    target = TargetRunner.load(random_target, device="cpu")
    samples = training_data.training_sequences(target, train_config(drafter, **TINY_RUN), DATA, show_progress=False)
    batcher = training_data.SequenceBatcher(samples, TINY_RUN["seq_len"], TINY_RUN["block_size"] + 2)
    expected = training_data.frequent_tokens(batcher.samples, 6, 64)
    assert load_file(str(out / "model.safetensors"))["d2t"].tolist() == expected.tolist()


def test_plateau_is_a_trend_pinned_under_two_percent_per_fifth_at_three_evaluations_running():
    def curve(values, every=10):
        return [{"step": every * (i + 1), "accept_len": v} for i, v in enumerate(values)]

    assert not plateaued(curve([1.0, 1.5, 2.0, 2.5]))  # too few evaluations
    assert not plateaued(curve([1.0, 1.5, 2.0, 2.5, 3.0]))
    assert not plateaued(curve([1.0, 1.5, 3.0, 2.99, 3.0]))  # 3.0 against mean(1.5, 3.0, 2.99): +20%
    assert plateaued(curve([1.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.01, 3.0]))  # steps 60-80 vs 90-100: +0.2%
    assert not plateaued(curve([1.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.5]))  # +8%
    assert not plateaued(curve([0.0] * 10))  # flat at zero: a head that never learned
    # A real SmolLM2 jetflow head (held-out proxy every 50 steps): still rising through its noise;
    # step 600 against step 450 alone (0.729 vs 0.740) read as a plateau.
    smollm2 = [0.074, 0.088, 0.143, 0.21, 0.311, 0.361, 0.456, 0.646, 0.74, 0.694, 0.625, 0.729]
    assert not plateaued(curve(smollm2, every=50))
    # A real `deep` dflash head at gamma = 0: flat from step 800 to 1,300 (one window's test holds at
    # 1,300 and again at 1,400, not at 1,350), then it climbed to 2.18 by step 2,300.
    stall = [0.1875, 0.2637, 0.2695, 0.3184, 0.4648, 0.4844, 0.4004, 0.6465, 0.7754, 0.8203, 0.7793, 1.0195, 0.8555,
             1.0957, 1.1387, 1.25, 1.3262, 1.166, 1.3281, 1.4766, 1.3398, 1.3613, 1.3203, 1.373, 1.4199, 1.1973,
             1.4277, 1.5664]
    assert not any(plateaued(curve(stall[:n], every=50)) for n in range(1, len(stall) + 1))
    assert plateaued(curve(stall[:17] + [1.33] * 14, every=50))  # a stall that lasts is a plateau
    assert not plateaued(curve(stall[:17] + [1.33] * 8, every=50))  # ... over 2/5 of the run, at three evaluations
    # The seed-0 SmolLM2 pair of issue 52 (published records): the plateau test of two smoothed points
    # stopped jetflow at 2,850 and dflash at 4,300, on the proxy's noise (~0.1 between evaluations).
    heads = ROOT / "results" / "baselines" / "smollm2" / "claim1" / "unmatched" / "heads"
    for name in ("jetflow-g7-s0", "dflash-g7-s0"):
        heldout = json.loads((heads / f"{name}.config.json").read_text())["training"]["heldout"]
        assert len(heldout) > 50 and plateau_step(heldout) is None, name


def test_training_records_heldout_curves_supervision_and_cost(random_target, tmp_path):
    run = {**TINY_RUN, "prompts": 24, "seq_len": 96}
    out = train_drafter(random_target, tmp_path / "jf", data_dir=DATA, show_progress=False, drafter="jetflow", steps=4,
                        eval_every=2, heldout=2, **run)
    record = json.loads((out / "config.json").read_text())["training"]
    assert record["heldout_sequences"] == 2 and [h["step"] for h in record["heldout"]] == [2, 4]
    for h in record["heldout"]:
        assert len(h["agreement"]) == run["block_size"] - 1 and all(0 <= a <= 1 for a in h["agreement"])
        assert 0 <= h["accept_len"] <= run["block_size"] - 1
    assert record["supervised_positions_per_step"] > 0 and record["head_flops_per_step"] > 0
    assert len(record["train_agreement"]) == 4 and record["step_seconds_mean"] > 0
    assert record["stop_reason"] == "steps" and record["converged"] is False  # two evaluations cannot show a plateau
    assert record["cpu_numerics"]["aten_capability"] == torch.backends.cpu.get_cpu_capability()


def test_a_head_folder_in_training_elsewhere_is_refused_then_trains_once_free(random_target, tmp_path):
    """Two trainers of one folder would interleave their checkpoints (a driver script restarted while a
    head it started still runs): the second is refused before it loads anything, and the lock is
    released after a run, so the next run of the same folder goes ahead."""
    from filelock import FileLock

    out = tmp_path / "jf"
    run = {**TINY_RUN, "prompts": 8, "seq_len": 64, "drafter": "jetflow", "steps": 2, "heldout": 0}
    with FileLock(tmp_path / ".jf.train.lock"), pytest.raises(JfbenchError, match="another process is training this head"):
        train_drafter(random_target, out, data_dir=DATA, show_progress=False, **run)
    assert not out.exists()
    assert train_drafter(random_target, out, data_dir=DATA, show_progress=False, **run) == out
    with training_loop.sole_trainer(out):  # released by the run above
        pass


def test_portable_numerics_refuse_once_torch_has_loaded_without_them(monkeypatch):
    for name in PORTABLE_CPU_NUMERICS:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(JfbenchError, match="before torch loads.*ATEN_CPU_CAPABILITY=avx2"):
        pin_portable_cpu_numerics()  # torch is loaded here: pinning now would train under the native kernels
    for name, value in PORTABLE_CPU_NUMERICS.items():
        monkeypatch.setenv(name, value)
    pin_portable_cpu_numerics()  # already in force: nothing to refuse


@pytest.mark.slow  # a fresh Python that loads torch and trains 2 steps (~20 s)
def test_cli_train_portable_numerics_records_the_pinned_kernels(random_target, tmp_path):
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("the pin caps x86-64 vector kernels at AVX2; this CPU has other ones")
    env = {k: v for k, v in os.environ.items() if k not in PORTABLE_CPU_NUMERICS}
    out = tmp_path / "head"
    args = [*tiny_train_args("jetflow", random_target, out), "--data-dir", str(DATA), "--device", "cpu",
            "--portable-numerics"]
    proc = subprocess.run([sys.executable, "-c", "import sys; from jetflow_bench.cli import main; sys.argv[1:] = "
                           f"{args!r}; main()"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    numerics = json.loads((out / "config.json").read_text())["training"]["cpu_numerics"]
    assert numerics == {"cpu_vendor": cpu_vendor(), "aten_capability": "AVX2", **PORTABLE_CPU_NUMERICS}  # AVX512 / None here: the flag did not reach the kernels


def test_stop_on_plateau_ends_the_run_and_counts_as_finished(random_target, tmp_path, monkeypatch):
    monkeypatch.setattr(training_loop, "heldout_proxy", lambda *a: {"agreement": [0.5], "accept_len": 1.0})
    options = {"drafter": "dflash", "steps": 12, "eval_every": 1, "stop_on_plateau": True, **TINY_RUN}
    out = train_drafter(random_target, tmp_path / "df", data_dir=DATA, show_progress=False, **options)
    record = json.loads((out / "config.json").read_text())["training"]
    assert record["stop_reason"] == "plateau" and record["steps_done"] == 10 and record["converged"] is True  # 4 evaluations over 2/5 of the run, 3 times
    assert not (out / ".partial").exists()
    assert training_loop.finished(out, train_config(**options))


def test_a_kill_while_a_checkpoint_replaces_the_last_one_loses_nothing(random_target, tmp_path):
    options = {"drafter": "dflash", "steps": 3, **TINY_RUN}
    whole = train_drafter(random_target, tmp_path / "whole", data_dir=DATA, show_progress=False, **options)
    part = train_drafter(random_target, tmp_path / "part", data_dir=DATA, show_progress=False, stop_at_step=2, **options)
    (part / ".partial").rename(part / ".partial.tmp")  # killed after the old checkpoint went, before the rename
    train_drafter(random_target, part, data_dir=DATA, show_progress=False, **options)
    record = json.loads((part / "config.json").read_text())["training"]
    assert len(record["sessions_seconds"]) == 2 and not (part / ".partial.tmp").exists()  # resumed at step 2
    a, b = load_file(str(whole / "model.safetensors")), load_file(str(part / "model.safetensors"))
    for key in a:
        torch.testing.assert_close(a[key], b[key])
    cut = train_drafter(random_target, tmp_path / "cut", data_dir=DATA, show_progress=False, stop_at_step=2, **options)
    (cut / ".partial" / "whole").unlink()  # a checkpoint killed while being written: not whole, not read
    (cut / ".partial").rename(cut / ".partial.tmp")
    train_drafter(random_target, cut, data_dir=DATA, show_progress=False, **options)
    assert len(json.loads((cut / "config.json").read_text())["training"]["sessions_seconds"]) == 1  # from step 0


def test_interrupted_run_resumes_to_the_same_head(random_target, tmp_path):
    options = {"drafter": "jetflow", "steps": 4, **TINY_RUN}
    whole = train_drafter(random_target, tmp_path / "whole", data_dir=DATA, show_progress=False, **options)
    part = train_drafter(random_target, tmp_path / "part", data_dir=DATA, show_progress=False, time_limit_s=0, **options)
    first = json.loads((part / "config.json").read_text())["training"]
    assert first["steps_done"] == 1 and first["sessions_seconds"] == [first["seconds"]]
    assert (part / ".partial" / "state.pt").is_file()
    train_drafter(random_target, tmp_path / "part", data_dir=DATA, show_progress=False, **options)
    assert not (part / ".partial").exists()
    record = json.loads((part / "config.json").read_text())["training"]  # the wall-clock of both sessions
    assert len(record["sessions_seconds"]) == 2 and record["sessions_seconds"][0] == first["seconds"]
    assert record["seconds"] == pytest.approx(sum(record["sessions_seconds"]), abs=0.011)
    a, b = load_file(str(whole / "model.safetensors")), load_file(str(part / "model.safetensors"))
    for key in a:
        torch.testing.assert_close(a[key], b[key])
    with pytest.raises(JfbenchError, match="other settings"):
        train_drafter(random_target, whole, data_dir=DATA, show_progress=False, **{**options, "steps": 5})
    # --stop-at-step: cut at a step of the same schedule, resumable, and the same head once run out
    cut = train_drafter(random_target, tmp_path / "cut", data_dir=DATA, show_progress=False, stop_at_step=2, **options)
    record = json.loads((cut / "config.json").read_text())["training"]
    assert (record["steps_done"], record["stop_reason"]) == (2, "step limit") and (cut / ".partial").is_dir()
    assert not training_loop.finished(cut, train_config(**options))
    train_drafter(random_target, cut, data_dir=DATA, show_progress=False, stop_at_step=2, **options)  # nothing left to run
    assert json.loads((cut / "config.json").read_text())["training"]["steps_done"] == 2
    train_drafter(random_target, cut, data_dir=DATA, show_progress=False, **options)
    c = load_file(str(cut / "model.safetensors"))
    for key in a:
        torch.testing.assert_close(a[key], c[key])


def test_ensure_head_trains_once_per_recipe(random_target):
    options = {"steps": 2, **TINY_RUN}
    first = ensure_head(random_target, "eagle", data_dir=DATA, show_progress=False, **options)
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    again = ensure_head(random_target, "eagle", data_dir=DATA, show_progress=False, **options)
    assert again == first and (again / "model.safetensors").stat().st_mtime_ns == stamp
    other = head_path(random_target, train_config("eagle", loss="rkl", **options))
    assert other != first


def test_cli_train_prints_folder_and_summary(random_target, tmp_path):
    from jetflow_bench.cli import _register_commands, app

    _register_commands()
    out = tmp_path / "head"
    args = [*tiny_train_args("dflash", random_target, out), "--decay", "0", "--data-dir", str(DATA), "--device", "cpu"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[-2] == str(out)
    assert json.loads(lines[-1])["steps_done"] == 2
    assert json.loads((out / "config.json").read_text())["training"]["config"]["decay"] == 0.0
    bad = CliRunner().invoke(app, [*args[:-2], "--loss", "kl"])
    assert bad.exit_code != 0 and isinstance(bad.exception, JfbenchError)
    seeded = CliRunner().invoke(app, [*args, "--seeds", "1,2"])
    assert seeded.exit_code == 0, seeded.output
    lines = seeded.stdout.strip().splitlines()
    assert [line for line in lines if line.startswith("/")] == [str(out / "seed-1"), str(out / "seed-2")]
    assert [json.loads(line)["seed"] for line in lines if line.startswith("{")] == [1, 2]
    weights = [load_file(str(out / f"seed-{s}" / "model.safetensors"))["fc.weight"] for s in (1, 2)]
    assert not torch.equal(*weights)  # the seed reached initialisation


@pytest.mark.slow
def test_short_training_lowers_the_loss(learned_heads):  # noqa: F811
    for path in learned_heads.values():
        losses = json.loads((path / "config.json").read_text())["training"]["losses"]
        assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5, path


def test_family_options_are_declared_parsed_and_keyed_like_flat_fields():
    """A family's own fields come from its declaration: parsed from text, range-checked, defaults
    filled in; the flat record (and so the cache key) matches the one written before families owned them."""
    from jetflow_bench.plugins import family_options

    assert [o.default for o in family_options("jetflow")] == ["mask", 0.5, False]  # the record's layout default keys its heads
    assert family_options("jetflow-refine") == family_options("jetflow") and family_options("dflash")[0].default is None
    config = train_config("jetflow", options={"prefix_zero": "0.25", "match_depth1": "false"})
    assert config.option_values == {"layout": "mask", "match_depth1": False, "prefix_zero": 0.25}
    with pytest.raises(JfbenchError, match="--prefix-zero 2.0 must be at most 1"):
        train_config("jetflow", options={"prefix_zero": 2.0})
    with pytest.raises(JfbenchError, match="--ttt-steps 'two' is not a valid int"):
        train_config("eagle", options={"ttt_steps": "two"})
    record = train_config("eagle").to_dict()
    assert {k: record[k] for k in ("ttt_steps", "layout", "prefix_zero", "match_depth1")} == {
        "ttt_steps": 15, "layout": None, "prefix_zero": 0.5, "match_depth1": False}
    again = train_config("eagle", **{k: v for k, v in record.items() if k != "drafter"})
    assert again.key("t") == train_config("eagle").key("t")  # a recorded recipe reads back as the same head
    assert train_config("dflash", ttt_steps=None) == train_config("dflash")


def test_family_flags_are_read_from_the_declarations():
    """`jfbench train`/`ablate` extra arguments: --NAME VALUE, --NAME=VALUE, a bare bool; typos refused."""
    from jetflow_bench.cli.recipe_flags import family_flags

    assert family_flags(["--layout", "prefix", "--match-depth1", "--ttt-steps=3"]) == {
        "layout": "prefix", "match_depth1": "true", "ttt_steps": "3"}
    with pytest.raises(JfbenchError, match="did you mean '--layout'"):
        family_flags(["--lyout", "prefix"])
    with pytest.raises(JfbenchError, match="--ttt-steps needs a value"):
        family_flags(["--ttt-steps"])


def test_an_interrupted_regeneration_resumes_from_its_journal(random_target, monkeypatch, tmp_path):
    """A kill after the first batch loses nothing: the rerun decodes only the prompts the journal lacks."""
    target = TargetRunner.load(random_target, device="cpu")
    prompts = [[5 + i, 7, 9 + i % 3] for i in range(5)]
    monkeypatch.setattr(training_data, "REGEN_BATCH", 2)
    whole = training_data.regenerate(target, prompts, 6, False)
    real, calls = training_data.generate, []

    def killed_after_one_batch(runner, batch, stop):
        calls.append(len(batch))
        if len(calls) > 1:
            raise KeyboardInterrupt
        return real(runner, batch, stop)

    journal = tmp_path / "regen.partial.jsonl"
    monkeypatch.setattr(training_data, "generate", killed_after_one_batch)
    with pytest.raises(KeyboardInterrupt):
        training_data.regenerate(target, prompts, 6, False, journal)
    with journal.open("a") as f:
        f.write('{"i": 4, "out": [1, 2')  # a line the kill cut short
    monkeypatch.setattr(training_data, "generate", lambda runner, batch, stop: calls.append(len(batch)) or real(runner, batch, stop))
    assert training_data.regenerate(target, prompts, 6, False, journal) == whole
    assert calls == [2, 2, 2, 1]  # 2 decoded before the kill, the other 3 after it


def test_jetflow_and_dflash_default_recipes_differ_in_the_in_block_mask_alone(random_target, monkeypatch, tmp_path):
    """`jfbench train --drafter jetflow` and `--drafter dflash` on one target resolve to the same data,
    anchors, steps, decay, loss, draft vocabulary and all-mask blocks: only the head's mask differs."""
    from typer.testing import CliRunner

    import jetflow_bench.training as training
    from jetflow_bench.cli import _register_commands, app

    _register_commands()
    resolved = {}

    def record(target, out, config, **kwargs):
        resolved[config.drafter] = config.resolved(30)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text('{"training": {}}')
        return out

    monkeypatch.setattr(training, "train_drafter", record, raising=False)
    for drafter in ("jetflow", "dflash"):
        args = ["train", "--drafter", drafter, "--target", str(random_target), "--out", str(tmp_path / drafter), "--draft-vocab", "512"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
    jetflow, dflash = resolved["jetflow"], resolved["dflash"]
    assert jetflow.keys() == dflash.keys() and jetflow["layout"] == "mask" and jetflow["draft_vocab"] == 512
    assert {k for k in jetflow if jetflow[k] != dflash[k]} == {"drafter", "head"}
    assert (jetflow["head"], dflash["head"]) == ("causal", "bidirectional")


def test_a_deep_targets_block_head_takes_the_papers_proportion_and_shallow_ones_keep_their_keys():
    """From 24 target layers a recipe without --layers gets round(5/36 of the depth) draft layers and as
    many taps, recorded (so its cache key differs from a 3-tap head's); toy targets, an explicit
    --layers and EAGLE (one layer, three taps) are left as given."""
    for drafter, depth, shape in (("jetflow", 30, (4, 4)), ("dflash", 36, (5, 5)), ("jetflow-refine", 24, (3, 3))):
        config = train_config(drafter).for_target(depth)
        assert (config.layers, config.num_taps) == shape and config.key("t") != train_config(drafter).key("t")
    for config, depth in ((train_config("jetflow"), 14), (train_config("dflash", layers=2), 30),
                          (train_config("eagle"), 36), (train_config("jetflow"), None)):
        assert config.for_target(depth) is config


def test_a_bidirectional_jetflow_head_is_a_dflash_head(random_target, tmp_path):
    """Under the new recipe `--drafter jetflow --head bidirectional` trains DFlash-T's head weight for
    weight, so a dflash head of the same recipe is claim 2's bidirectional arm (`--checkpoint
    head=bidirectional=DFLASH_HEAD`). Fails if the two objectives build other blocks, weights or
    batch orders."""
    options = {"steps": 3, **TINY_RUN}
    dflash = train_drafter(random_target, tmp_path / "dflash", data_dir=DATA, show_progress=False, drafter="dflash",
                           **options)
    bidirectional = train_drafter(random_target, tmp_path / "jetflow", data_dir=DATA, show_progress=False,
                                  drafter="jetflow", head="bidirectional", **options)
    causal = train_drafter(random_target, tmp_path / "causal", data_dir=DATA, show_progress=False, drafter="jetflow",
                           **options)
    a, b, c = (load_file(str(p / "model.safetensors")) for p in (dflash, bidirectional, causal))
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)
    assert any(not torch.equal(a[key], c[key]) for key in a)  # the mask does change the weights
