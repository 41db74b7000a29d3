"""The target runner: one forward path for prefill, plain decoding and tree verification.

It drives any Hugging Face causal LM of the Llama / Qwen2 / Qwen3 / Mistral families (decoder
layers with ``self_attn.{q,k,v,o}_proj``, optional ``q_norm``/``k_norm``, ``mlp`` and the two
RMSNorms), reusing the loaded modules' weights and replacing only attention + cache handling
(gpt-fast style), so that trees of ragged batches can be written into a preallocated cache
in place. Prefill is the verification of a chain; plain decoding is the verification of a root.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.flops import TransformerShape
from jetflow_bench.core.runtime import resolve_device, resolve_dtype
from jetflow_bench.engine.attention import DEFAULT_ATTENTION, get_attention
from jetflow_bench.engine.compiled import check_compile, compile_mode, pad_visibility
from jetflow_bench.engine.forwards import EagerVerify, PreparedTrees, StaticVerify, VerifyForward
from jetflow_bench.engine.kv_cache import KVCache, PersistentCache, write_entries
from jetflow_bench.engine.rope import rotate
from jetflow_bench.engine.tree import DraftTree, ancestor_mask, pad_trees
from jetflow_bench.kernels.mask import TreeMask
from jetflow_bench.targets import check_hub_id, resolve_target

# The tap that reads the token embeddings (the input of layer 0); tap i >= 0 is layer i's output.
# EAGLE-3 heads name layer inputs, so their aux layer 0 is this tap.
EMBEDDING_TAP = -1


@dataclass
class ForwardOutput:
    logits: torch.Tensor  # (B, N, V) float32, one row per tree node (padding rows are garbage); prefill: (B, 1, V)
    hidden: torch.Tensor | None  # (B, N, K, H) tapped layer outputs in the order asked for, None without taps
    trees: PreparedTrees  # what was run


class TargetRunner:
    """A causal LM with a batched in-place KV cache; see the module docstring."""

    def __init__(
        self,
        model: nn.Module,
        tokenizer,
        name: str,
        attention: str = DEFAULT_ATTENTION,
        compile: bool | str | None = False,
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name
        self.config = model.config
        self.attention_backend = attention  # sdpa | triton | flex (jetflow_bench.engine.attention)
        decoder = model.model
        self.embed = decoder.embed_tokens
        self.layers = list(decoder.layers)
        self.norm = decoder.norm
        self.rotary = decoder.rotary_emb
        self.lm_head = model.lm_head
        first = self.layers[0].self_attn
        self.head_dim = first.head_dim
        self.q_heads = self.config.num_attention_heads
        self.kv_heads = self.config.num_key_value_heads
        self.scale = first.scaling
        self.shape = TransformerShape.of(self.layers, self.lm_head, self.q_heads, self.head_dim)  # for FLOP counts
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        self.attend = get_attention(attention, self.device)
        self.context_window = int(getattr(self.config, "max_position_embeddings", 1 << 30))
        self.cache: KVCache | None = None  # the live batch's cache, from `prefill` until `release`
        self.compile_mode = compile_mode(compile)  # inductor | graphs | None: eager (jetflow_bench.engine.compiled)
        if self.compile_mode:
            check_compile(self.device, attention, self.compile_mode)
        # Verifies run through one of two forwards (`jetflow_bench.engine.forwards`); prefill always eagerly.
        self.eager = EagerVerify(self._forward, self._fresh_cache, self.device)
        self.static: StaticVerify | None = None  # compiled: static shapes
        if self.compile_mode:
            storage = PersistentCache(len(self.layers), self.kv_heads, self.head_dim, self.dtype, self.device)
            self.static = StaticVerify(self.compile_mode, storage, self._decode, self._layer, self.scale,
                                       gqa=self.q_heads != self.kv_heads)
        self.verifier: VerifyForward = self.static or self.eager

    @classmethod
    def load(
        cls,
        name_or_path: str | Path,
        device: str | None = None,
        dtype: str | None = None,
        attention: str = DEFAULT_ATTENTION,
        compile: bool | str | None = False,
    ) -> TargetRunner:
        """Load by name (`jetflow_bench.targets`), hub id or local directory, exactly as a real user's model
        would be; ``compile``: decode and verify at bucketed static shapes, through Inductor (True or
        ``"inductor"``) or recorded as CUDA graphs (``"graphs"``; jetflow_bench.engine.compiled)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # our own progress display owns the terminal
        dev = resolve_device(device)
        torch_dtype = resolve_dtype(dtype, dev)
        get_attention(attention, dev)  # a missing kernel package is a usage error before any model loads
        if compile_mode(compile):
            check_compile(dev, attention, compile)
        name = resolve_target(name_or_path)
        check_hub_id(name)
        try:
            tokenizer = AutoTokenizer.from_pretrained(name)
            model = AutoModelForCausalLM.from_pretrained(name, dtype=torch_dtype, attn_implementation="sdpa")
        except (OSError, ValueError) as err:
            reason = str(err).strip().splitlines()[0][:200]
            raise JfbenchError(
                f"cannot load target {name!r} ({reason}): pass a local model directory "
                "(e.g. one made by `jfbench target train`) or a reachable Hugging Face hub id"
            ) from err
        _check_supported(model, name)
        runner = cls(model.to(dev), tokenizer, name=name, attention=attention, compile=compile)
        runner.check_layer_loop()
        return runner

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        ids: set[int] = set()
        gen = getattr(self.model, "generation_config", None)
        for source in (getattr(gen, "eos_token_id", None), getattr(self.tokenizer, "eos_token_id", None)):
            if isinstance(source, int):
                ids.add(source)
            elif source:
                ids.update(source)
        return tuple(sorted(ids))

    # ----------------------------------------------------------------- public API
    def prefill(
        self, prompts: Sequence[Sequence[int]], capacity: int, taps: Sequence[int] = ()
    ) -> ForwardOutput:
        """Start a batch: take a cache of ``capacity`` slots per row and run every prompt.

        Each prompt is verified as a chain, so afterwards the prompt is the committed prefix. A
        live batch is never silently replaced: `release` it first (or use `score`). Eager: a new
        cache; compiled: the runner's persistent one, reset (`StaticVerify.take`).

        The logits are each prompt's last token's only, (B, 1, V): decoding needs no other, and the
        LM head over every prompt token (49k columns on SmolLM2) made a CPU prefill about a quarter
        slower (`transformers` generate skips it too). ``taps`` cover every token.
        """
        self._check_prompts(prompts, capacity, taps)
        if self.cache is not None:
            raise RuntimeError("prefill() while a batch is live would discard its cache: call release() first")
        return self._run_chains(prompts, self.verifier.take(len(prompts), capacity), taps, last_only=True)

    def admit(self, prompts: Sequence[Sequence[int]], capacity: int, taps: Sequence[int] = ()) -> ForwardOutput:
        """Prefill ``prompts`` into new rows after the live batch's (continuous batching; a `prefill`
        when no batch is live). The newcomers run apart, as chains into a cache of their own whose rows
        then join the live cache (`KVCache.add_rows`); the output covers the newcomers only. Eager only."""
        if self.static is not None:
            raise JfbenchError("requests joining a running batch (--load) need the eager engine: drop --compile")
        live = self.cache
        if live is None:
            return self.prefill(prompts, capacity, taps)
        self._check_prompts(prompts, capacity, taps)
        try:
            out = self._run_chains(prompts, self._fresh_cache(len(prompts), capacity), taps, last_only=True)
            live.add_rows(self.cache)
        finally:
            self.cache = live
        return out

    def release(self) -> None:
        """End the live batch. Eager: its cache is freed; compiled: it waits, reset, for the next batch."""
        self.cache = None

    def score(self, prompts: Sequence[Sequence[int]], taps: Sequence[int] = (), logits: bool = True) -> ForwardOutput:
        """One forward over each prompt as a chain (logits + taps), leaving a live batch untouched:
        for training targets and tie checks, which need no cache afterwards. ``logits=False``: the
        last token's only, (B, 1, V), for callers that need the taps alone (`engine.simulate`; every
        position's logits were 1.4 GB for 16 SmolLM2 sequences of 450 tokens)."""
        capacity = max(len(p) for p in prompts)
        self._check_prompts(prompts, capacity, taps)
        # A fresh eager-layout cache, never the persistent one: it may hold the live batch, and the
        # chains run eagerly anyway.
        live = self.cache
        try:
            return self._run_chains(prompts, self._fresh_cache(len(prompts), capacity), taps, last_only=not logits)
        finally:
            self.cache = live

    def verify(self, trees: Sequence[DraftTree], taps: Sequence[int] = ()) -> ForwardOutput:
        """ONE forward over every row's tree (tree-causal mask, positions = length + depth)."""
        return self.forward(self.prepare(trees), taps)

    def prepare(self, trees: Sequence[DraftTree], min_rows: int | None = None) -> PreparedTrees:
        """Pad the trees and build masks, slots and positions (engine work, not model work).

        ``min_rows``: pad to at least this many nodes (None: the verifier's choice, `VerifyForward.rows`)."""
        if min_rows is None:
            min_rows = self.verifier.rows(max(len(t) for t in trees), len(trees))
        return self._prepare(trees, self.verifier, min_width=min_rows)

    def check_layer_loop(self, tolerance: float = 0.1) -> None:
        """Refuse a model whose own forward the engine's layer loop does not reproduce.

        `_decode` re-implements a Llama-style block; a model that passes `_check_supported`'s
        structural checks can still differ (Granite's residual and logit multipliers, say) and would
        then decode wrongly in every arm alike, which no losslessness check can see. One 8-token
        forward through both, compared relative to the logits' scale, catches that at load.
        """
        vocab = self.config.vocab_size
        ids = [(1 + 7919 * i) % vocab for i in range(8)]
        ours = self.score([ids]).logits[0]  # (8, V) float32
        with torch.inference_mode():
            theirs = self.model(torch.tensor([ids], device=self.device)).logits[0].float()
        error = ((ours - theirs).abs().max() / theirs.abs().max().clamp_min(1e-6)).item()
        if error > tolerance:
            raise JfbenchError(
                f"target {self.name!r} ({type(self.model).__name__}): jfbench's layer loop does not reproduce the "
                f"model's own logits (max difference {error:.0%} of their scale), so it would decode wrongly; "
                "this architecture is not supported"
            )

    def tree_width(self, budget: int) -> int:
        """Cache slots a tree of ``budget`` nodes occupies while verified (its bucket when compiled)."""
        return self.verifier.tree_width(budget)

    def warm_up(self, batch: int, budget: int, capacity: int, taps: Sequence[int] = ()) -> float:
        """Compiled: run every shape a decode of ``batch`` rows at ``budget`` can meet before the clock
        starts (`StaticVerify.warm_up`). Returns the seconds spent (0.0 when eager)."""
        if self.static is None:
            return 0.0
        if self.cache is not None:
            raise RuntimeError("warm_up() while a batch is live would overwrite its cache: call release() first")
        try:
            return self.static.warm_up(batch, budget, capacity, tuple(taps), self._prepare_on)
        finally:
            self.cache = None

    def _prepare_on(self, cache: KVCache, trees: list[DraftTree]) -> PreparedTrees:
        """Make ``cache`` the live one and prepare ``trees`` on it for the verifier (a warm-up's shapes)."""
        self.cache = cache
        return self._prepare(trees, self.verifier)

    def _fresh_cache(self, batch: int, capacity: int) -> KVCache:
        return KVCache(len(self.layers), batch, self.kv_heads, self.head_dim, capacity, self.dtype, self.device)

    def _run_chains(
        self, prompts: Sequence[Sequence[int]], cache: KVCache, taps: Sequence[int], last_only: bool
    ) -> ForwardOutput:
        """Make ``cache`` the live one and run each prompt into it as a chain (eagerly), committed;
        ``last_only``: logits at each prompt's last token only (`prefill`)."""
        self.cache = cache
        prepared = self._prepare([DraftTree.chain(p) for p in prompts], self.eager)
        last = torch.tensor([[len(p) - 1] for p in prompts], device=self.device) if last_only else None
        logits, hidden = self._forward(prepared.tokens, prepared.positions, prepared.slots, prepared.mask,
                                       prepared.kv_len, cache, tuple(taps), last)
        out = ForwardOutput(logits, hidden, prepared)
        cache.commit([range(len(p)) for p in prompts])
        return out

    def _prepare(self, trees: Sequence[DraftTree], forward: VerifyForward, min_width: int = 1) -> PreparedTrees:
        """The trees as ``forward`` runs them on the live cache, padded to at least ``min_width`` nodes."""
        cache = self._require_cache()
        if len(trees) != cache.batch:
            raise ValueError(f"{len(trees)} trees for a batch of {cache.batch} rows")
        tokens, parents, depths, valid = (t.to(self.device) for t in pad_trees(trees, min_width=min_width))
        n = tokens.shape[1]
        bucket = forward.bucket(n)
        width = bucket or n
        lengths = torch.tensor(cache.lengths, device=self.device)  # (B,)
        kv_len = forward.span(cache, n)
        if max(cache.lengths) + width > cache.capacity:
            raise JfbenchError(
                f"a tree of {n} nodes does not fit the KV cache ({max(cache.lengths)} used of {cache.capacity}): "
                "lower the budget or raise the cache capacity"
            )
        slots = lengths[:, None] + torch.arange(n, device=self.device)  # (B, N)
        ancestors = ancestor_mask(parents, depths)  # (B, N, N)
        # One row decoding one token sees every key: SDPA then runs unmasked (its fastest path); the
        # kernel backends still get the (trivial) mask, built once here rather than once per layer.
        plain = cache.batch == 1 and n == 1 and self.attention_backend == "sdpa" and bucket is None
        # A bucket's padding nodes see the prefix and themselves (`pad_visibility`).
        mask = None if plain else TreeMask.for_tree(pad_visibility(ancestors, width), lengths, kv_len, self.dtype)
        return PreparedTrees(tokens, parents, depths, valid, ancestors, slots, lengths[:, None] + depths, mask, kv_len,
                             bucket)

    def forward(self, batch: PreparedTrees, taps: Sequence[int] = ()) -> ForwardOutput:
        """The target forward over a prepared tree batch; writes the nodes' KV into the cache.

        ``taps``: layers whose outputs come back in ``hidden``, in exactly this order.
        """
        forward = self.eager if batch.width is None else self.verifier  # chains run eagerly on a compiled runner
        logits, hidden = forward(batch, self._require_cache(), tuple(taps))
        return ForwardOutput(logits, hidden, batch)

    def commit(self, paths: Sequence[Sequence[int]]) -> None:
        """Keep each row's accepted path (node indices, root first); rejected nodes vanish."""
        self._require_cache().commit(paths)

    def keep_rows(self, rows: Sequence[int]) -> None:
        self._require_cache().keep_rows(rows)

    # ----------------------------------------------------------------- internals
    def _check_prompts(self, prompts: Sequence[Sequence[int]], capacity: int, taps: Sequence[int]) -> None:
        longest = max(len(p) for p in prompts)
        if min(len(p) for p in prompts) == 0:
            raise JfbenchError("an empty prompt was given: every prompt needs at least one token")
        if longest > self.context_window:
            raise JfbenchError(
                f"a prompt has {longest} tokens, longer than the target's context of {self.context_window}: "
                "shorten the prompt or use a model with a longer context"
            )
        if longest > capacity:
            raise JfbenchError(f"cache capacity {capacity} is smaller than the longest prompt ({longest})")
        bad = [t for t in taps if not EMBEDDING_TAP <= t < len(self.layers)]
        if bad:
            raise JfbenchError(f"tap layers {bad} do not exist: the target has {len(self.layers)} layers "
                               f"(tap {EMBEDDING_TAP} is the embedding output)")

    def _require_cache(self) -> KVCache:
        if self.cache is None:
            raise RuntimeError("call prefill() before verify()/commit()")
        return self.cache

    @torch.inference_mode()
    def _forward(
        self,
        tokens: torch.Tensor,  # (B, N)
        positions: torch.Tensor,  # (B, N)
        slots: torch.Tensor,  # (B, N) cache slot of each node
        mask: TreeMask | None,
        kv_len: int,
        cache: KVCache,
        taps: tuple[int, ...],
        logit_nodes: torch.Tensor | None = None,  # (B, R): the nodes whose logits to compute; None: all
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The eager forward: keys over the first ``kv_len`` slots, any attention backend."""

        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return self.attend(q, k, v, mask, self.scale)

        return self._decode(tokens, positions, slots, cache, taps,
                            lambda i, layer, h, cos, sin: self._layer(layer, h, cos, sin, slots, cache.k[i], cache.v[i],
                                                                      kv_len, attend), logit_nodes)

    def _decode(
        self,
        tokens: torch.Tensor,  # (B, N)
        positions: torch.Tensor,  # (B, N)
        slots: torch.Tensor,  # (B, N) cache slot of each node
        cache: KVCache,
        taps: tuple[int, ...],
        run_layer,  # (index, layer, h, cos, sin) -> h: one decoder layer, writing its keys/values into the cache
        logit_nodes: torch.Tensor | None = None,  # (B, R) nodes to score (logits (B, R, V)); None: all N
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        h = self.embed(tokens)  # (B, N, H)
        cos, sin = self.rotary(h, positions)  # (B, N, hd) each
        cos, sin = cos[:, None], sin[:, None]  # broadcast over heads
        tapped: dict[int, torch.Tensor] = {EMBEDDING_TAP: h}  # layer -> its output (B, N, H)
        for i, layer in enumerate(self.layers):
            h = run_layer(i, layer, h, cos, sin)
            if i in taps:
                tapped[i] = h
        if logit_nodes is not None:
            h = h.gather(1, logit_nodes[..., None].expand(-1, -1, h.shape[-1]))  # (B, R, H)
        logits = self.lm_head(self.norm(h)).float()  # (B, N or R, V)
        hidden = torch.stack([tapped[t] for t in taps], dim=2) if taps else None  # (B, N, K, H), K in taps order
        return logits, hidden

    def _layer(
        self,
        layer: nn.Module,
        h: torch.Tensor,  # (B, N, H)
        cos: torch.Tensor,  # (B, 1, N, hd)
        sin: torch.Tensor,
        slots: torch.Tensor,  # (B, N) cache slot of each node
        keys: torch.Tensor,  # (B, H_kv, T_cap, hd): this layer's cache, written in place
        values: torch.Tensor,
        kv_len: int,  # slots attended over
        attend,  # (q (B, H_q, N, hd), keys, values (B, H_kv, kv_len, hd)) -> (B, H_q, N, hd)
    ) -> torch.Tensor:
        b, n = h.shape[:2]
        attn = layer.self_attn
        x = layer.input_layernorm(h)
        q = attn.q_proj(x).view(b, n, self.q_heads, self.head_dim)
        k = attn.k_proj(x).view(b, n, self.kv_heads, self.head_dim)
        v = attn.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)  # (B, H_kv, N, hd)
        if hasattr(attn, "q_norm"):
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # (B, H, N, hd)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        write_entries(keys, values, slots, k, v)
        o = attend(q, keys[:, :, :kv_len], values[:, :, :kv_len])  # (B, H_q, N, hd)
        h = h + attn.o_proj(o.transpose(1, 2).reshape(b, n, -1))
        mlp_out = layer.mlp(layer.post_attention_layernorm(h))
        return h + (mlp_out[0] if isinstance(mlp_out, tuple) else mlp_out)


def _check_supported(model: nn.Module, name: str) -> None:
    decoder = getattr(model, "model", None)
    layers = getattr(decoder, "layers", None)
    attn = getattr(layers[0], "self_attn", None) if layers else None
    needed = ("q_proj", "k_proj", "v_proj", "o_proj")
    if attn is None or not all(hasattr(attn, p) for p in needed) or not hasattr(decoder, "rotary_emb"):
        raise JfbenchError(
            f"target {name!r} ({type(model).__name__}) is not a supported architecture: jfbench drives "
            "Llama / Qwen2 / Qwen3 / Mistral-style decoders (q/k/v/o projections with RoPE)"
        )
    if any(getattr(layer.self_attn, "sliding_window", None) for layer in layers):
        raise JfbenchError(f"target {name!r} uses sliding-window attention, which jfbench does not support yet")
    if any(hasattr(layers[0], n) for n in ("pre_feedforward_layernorm", "post_feedforward_layernorm")):  # Gemma 2/3, OLMo 2
        raise JfbenchError(
            f"target {name!r} ({type(model).__name__}) normalises its sublayers' outputs (Gemma's sandwich "
            "norms, OLMo 2's post-norms), which jfbench's Llama-style layer loop does not apply; it would decode wrongly, so it is refused"
        )
    # `_decode` reads exactly these; e.g. Cohere (one norm, parallel
    # attention and MLP) lacks one and would otherwise fail in the first forward with a traceback.
    parts = ("input_layernorm", "post_attention_layernorm", "mlp")
    missing = next((p for layer in layers for p in parts if not hasattr(layer, p)), None)
    if missing is not None:
        raise JfbenchError(
            f"target {name!r} ({type(model).__name__}) has decoder layers that are not pre-norm Llama-style "
            f"(input_layernorm -> attention, post_attention_layernorm -> mlp; no {missing}): "
            "jfbench's layer loop cannot run them"
        )
