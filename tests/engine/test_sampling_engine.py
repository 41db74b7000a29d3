"""Speculative sampling through the engine keeps the target's distribution (temperature > 0).

A random Qwen3 target with a 12-token vocabulary and peaked logits; the first 3 generated tokens
of 20,000 copies of one prompt (decoded as ONE batch, each copy with its own random stream) are
compared with the target's exact law of those 3 tokens (1,728 outcomes, enumerated with one-off
forwards) by a chi-square test. Each such run takes ~10 s on an idle core; all but the random-tree
run and the power check are marked slow. Drafters: a chain (the target's own greedy continuation), random
trees, n-gram tries, and untrained eagle / dflash / jetflow heads; also at top-p < 1. A wrong rule
(no residual update) must fail the same test; greedy must stay greedy.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from drafters import DRAFTERS
from jetflow_bench.engine import loop as engine
from jetflow_bench.engine.acceptance import Acceptance, accept_tree
from jetflow_bench.engine.drafter import Drafter, SequenceView
from jetflow_bench.engine.loop import generate
from jetflow_bench.engine.sampling import SamplingParams, inverse_cdf, target_probs
from jetflow_bench.engine.stopping import StopRule
from jetflow_bench.engine.target import TargetRunner
from jetflow_bench.engine.tree import DraftTree
from jetflow_bench.heads.checkpoint import TargetShape, save_head
from jetflow_bench.heads.head import DraftHead, HeadConfig
from tests.helpers.chi_square import ALPHA, chi_square_p

VOCAB, HIDDEN = 12, 64
PROMPT = [3, 4, 5, 3, 4, 5, 3, 4]  # repeats, so the n-gram drafter proposes continuations
N_SAMPLES, NEW_TOKENS, BUDGET = 20_000, 3, 8
BUDGETS = {"eagle": 4}  # eagle drafts one depth per head forward: a smaller tree keeps it cheap
T1 = SamplingParams(temperature=1.0, seed=11)
T1_TOP_P = SamplingParams(temperature=1.0, top_p=0.8, seed=12)


def save_target(path: Path) -> Path:
    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256, eos_token_id=1, bos_token_id=0,
        pad_token_id=0, tie_word_embeddings=False,
    )
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        model.model.norm.weight.mul_(40.0)  # peaked target laws; the heads (own norm) stay flat
    model.save_pretrained(path)
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w2"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="w1", pad_token="w0", unk_token="w2").save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return save_target(tmp_path_factory.mktemp("target12"))


@pytest.fixture(scope="module")
def target(folder) -> TargetRunner:
    return TargetRunner.load(folder, device="cpu")


def next_logits(runner: TargetRunner, contexts: Sequence[Sequence[int]]) -> torch.Tensor:
    """(C, V) the target's logits after each context."""
    out = runner.score(contexts)  # leaves the engine's live batch alone
    return out.logits[torch.arange(len(contexts)), torch.tensor([len(c) - 1 for c in contexts])]


def exact_law(runner: TargetRunner, params: SamplingParams) -> dict[tuple[int, ...], float]:
    """(x1, x2, x3) -> probability under plain sampling of the target."""
    p1 = target_probs(next_logits(runner, [PROMPT]), params)[0]  # (V,)
    firsts = [(a,) for a in range(VOCAB)]
    p2 = target_probs(next_logits(runner, [PROMPT + list(c) for c in firsts]), params)  # (V, V)
    seconds = [(a, b) for a in range(VOCAB) for b in range(VOCAB)]
    p3 = target_probs(next_logits(runner, [PROMPT + list(c) for c in seconds]), params)  # (V*V, V)
    return {(a, b, c): float(p1[a] * p2[a, b] * p3[a * VOCAB + b, c])
            for a in range(VOCAB) for b in range(VOCAB) for c in range(VOCAB)}


def sample_first_tokens(target: TargetRunner, drafter: Drafter | None, params: SamplingParams,
                        n: int = N_SAMPLES) -> tuple[list[tuple[int, ...]], int]:
    """(first 3 tokens of each of n copies of PROMPT, accepted drafted tokens in total)."""
    stop = StopRule(NEW_TOKENS, frozenset())
    budget = BUDGETS.get(drafter.name, BUDGET) if drafter else 1
    result = generate(target, [PROMPT] * n, stop, budget=budget, drafter=drafter, sampling=params)
    return [tuple(r.output_tokens) for r in result.requests], sum(s.accepted for s in result.steps)


class ChainDrafter(Drafter):
    """A chain: the target's own greedy continuation (a point-mass draft accepted often at T = 1)."""

    name = "greedy-chain"

    def __init__(self, runner: TargetRunner) -> None:
        self.runner = runner
        self.chain = cache(self._chain)

    def _chain(self, context: tuple[int, ...], length: int) -> tuple[int, ...]:
        out = list(context)
        for _ in range(length):
            out.append(int(next_logits(self.runner, [out])[0].argmax()))
        return tuple(out[len(context):])

    def propose(self, seqs: Sequence[SequenceView], budget: int) -> list[DraftTree]:
        return [DraftTree.chain([s.tokens[-1], *self.chain(tuple(s.tokens), budget - 1)]) for s in seqs]


class RandomTreeDrafter(Drafter):
    """Random trees with distinct sibling tokens, a deterministic function of the context."""

    name = "random-tree"

    def propose(self, seqs: Sequence[SequenceView], budget: int) -> list[DraftTree]:
        return [random_tree(tuple(s.tokens), budget) for s in seqs]


@cache
def random_tree(context: tuple[int, ...], size: int) -> DraftTree:
    rng = random.Random(hash(context))
    tokens, parents, used = [context[-1]], [-1], [set()]
    while len(tokens) < size:
        parent = rng.randrange(len(tokens))
        token = rng.randrange(VOCAB)
        if token in used[parent]:
            continue
        used[parent].add(token)
        used.append(set())
        tokens.append(token)
        parents.append(parent)
    return DraftTree(tokens, parents)


def head_checkpoint(target: TargetRunner, path: Path, drafter: str) -> Path:
    cfg = HeadConfig(
        hidden_size=HIDDEN, intermediate_size=128, num_layers=1, num_heads=4, num_kv_heads=2, head_dim=16,
        taps=(0, 1), block_size=8, mode="bidirectional" if drafter == "dflash" else "causal", mask_token_id=2,
        eagle_input=drafter == "eagle",
    )
    head = DraftHead(cfg, target.embed, target.lm_head)
    head.init_weights(0)
    return save_head(head, path, drafter, TargetShape.of(target), {"note": "untrained"})


@pytest.fixture(scope="module")
def law_t1(target):
    return exact_law(target, T1)


@pytest.fixture(scope="module")
def law_top_p(target):
    return exact_law(target, T1_TOP_P)


@pytest.fixture(scope="module")
def drafters(target, tmp_path_factory):
    root = tmp_path_factory.mktemp("heads12")
    built = {"chain": ChainDrafter(target), "random-tree": RandomTreeDrafter(),
             "ngram": DRAFTERS.get("ngram").build(target)}
    for name in ("eagle", "dflash", "jetflow"):
        built[name] = DRAFTERS.get(name).build(target, head_checkpoint(target, root / name, name))
    return built


@pytest.mark.slow
def test_plain_sampling_matches_the_exact_law(target, law_t1):
    # Checks the harness itself: the AR arm draws from the law the other tests compare with.
    samples, _ = sample_first_tokens(target, None, T1)
    assert chi_square_p(samples, law_t1) > ALPHA


@pytest.mark.parametrize("name", [
    "random-tree", *(pytest.param(n, marks=pytest.mark.slow) for n in ("chain", "ngram", "eagle", "dflash", "jetflow")),
])
def test_speculative_sampling_keeps_the_target_distribution(target, drafters, law_t1, name):
    # Bug caught: any acceptance or bonus rule that is not the target's law (e.g. a missing
    # residual update, uniforms reused across depths, the bonus drawn at the wrong node).
    samples, accepted = sample_first_tokens(target, drafters[name], T1)
    assert accepted > 0.1 * N_SAMPLES, "drafts must be accepted, or the test proves nothing"
    assert chi_square_p(samples, law_t1) > ALPHA


@pytest.mark.slow
def test_speculative_sampling_keeps_the_distribution_at_top_p(target, drafters, law_top_p):
    for name in ("random-tree", "jetflow"):
        samples, accepted = sample_first_tokens(target, drafters[name], T1_TOP_P)
        assert accepted > 0.1 * N_SAMPLES
        assert chi_square_p(samples, law_top_p) > ALPHA, name


def no_residual_update(generator: torch.Generator):
    """The wrong rule, batched: try children in order, accept c with probability p(c) with a fresh
    coin, never remove rejected children from p, and draw the bonus from p itself."""

    def rule(tokens, parents, depths, valid, ancestors, target_logits, uniforms, params) -> Acceptance:
        b, n = tokens.shape
        probs = target_probs(target_logits, params)  # (B, N, V)
        at_parent = probs[torch.arange(b)[:, None], parents.clamp(min=0)]  # (B, N, V) p at each node's parent
        p_child = at_parent.gather(2, tokens[..., None])[..., 0]  # (B, N) p(token) at the parent
        coins = torch.rand(b, n, generator=generator, dtype=torch.float64)
        hit = valid & (parents >= 0) & (coins < p_child)  # (B, N)
        index = torch.arange(n).expand(b, n)
        first = torch.full((b, n + 1), n).scatter_reduce(  # (B, N+1): first accepted child per node
            1, torch.where(hit, parents, n), torch.where(hit, index, n), reduce="amin")[:, :n]
        bonus = inverse_cdf(probs, torch.rand(b, n, generator=generator, dtype=torch.float64))  # from p itself
        chosen = torch.where(first < n, tokens.gather(1, first.clamp(max=n - 1)), bonus)
        return accept_tree(tokens, parents, depths, valid, ancestors, chosen)

    return rule


def test_power_no_residual_update_fails_the_same_test(target, drafters, law_t1, monkeypatch):
    # Without this, a chi-square test too weak to see a wrong rule would pass everything.
    monkeypatch.setattr(engine, "sample_accept", no_residual_update(torch.Generator().manual_seed(0)))
    samples, accepted = sample_first_tokens(target, drafters["random-tree"], T1)
    assert accepted > 0.1 * N_SAMPLES
    assert chi_square_p(samples, law_t1) < ALPHA


def test_sampled_arms_match_plain_sampling_request_for_request(target, drafters):
    # The streams are keyed by (seed, request, position): a drafter changes how many tokens a step
    # emits, never which uniform draws a token, so the text equals AR sampling's (fp flips aside).
    plain, _ = sample_first_tokens(target, None, T1, n=2000)
    for name in ("random-tree", "jetflow"):
        spec, _ = sample_first_tokens(target, drafters[name], T1, n=2000)
        assert sum(a == b for a, b in zip(plain, spec, strict=True)) >= 1998, name


def test_streams_do_not_depend_on_the_batch(target):
    # Bug caught: a request's samples changing with its batch (ids must name the stream, not the row).
    stop = StopRule(6, frozenset())
    together = generate(target, [PROMPT] * 4, stop, sampling=T1, request_ids=[10, 11, 12, 13])
    alone = generate(target, [PROMPT], stop, sampling=T1, request_ids=[12])
    assert together.requests[2].output_tokens == alone.requests[0].output_tokens
    assert len({tuple(r.output_tokens) for r in together.requests}) > 1


def test_temperature_zero_is_greedy_whatever_the_seed(target, drafters):
    # T = 0 goes through the same draw-and-accept code and must give today's greedy tokens.
    stop = StopRule(12, frozenset())
    prompts = [PROMPT, PROMPT[:5]]
    greedy = [r.output_tokens for r in generate(target, prompts, stop).requests]
    for name in ("random-tree", "ngram", "jetflow"):
        for params in (SamplingParams(seed=5), SamplingParams(seed=6, top_p=0.5, top_k=3)):
            result = generate(target, prompts, stop, budget=BUDGET, drafter=drafters[name], sampling=params)
            assert [r.output_tokens for r in result.requests] == greedy
