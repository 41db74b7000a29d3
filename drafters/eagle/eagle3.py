"""EAGLE-3 heads in the public layout (SpecForge trains them; vLLM and SGLang serve them).

An EAGLE-3 head differs from jfbench's own ``eagle`` head in three places, so it has its own module:

- fusion: ``fc`` maps three target states (low, mid, high; ``3 * target_hidden`` wide) to the
  draft's hidden size, with no norm after it;
- its one decoder layer (``midlayer``) takes ``[input_layernorm(embedding) ; hidden_norm(feature)]``,
  ``2 * hidden`` wide, into plain Llama attention (no q/k norm); the residual stream is the
  feature itself, and the layer's pre-norm output is fed back as the next step's feature;
- its LM head covers a draft vocabulary of ``draft_vocab_size`` tokens; draft token ``d`` is target
  token ``d + d2t[d]`` (``t2d`` is the inverse membership mask over the target vocabulary).

Context: entry p pairs the committed token p + 1 with the target's fused feature at p and sits at
position p; its keys/values are what the drafter caches (`PairCache`). The newest pair (the root
token with the feature before it) is the first drafted entry, so a proposal's entries are laid out
exactly as jfbench's ``eagle`` drafter lays out its own: ``eagle`` and ``eagle3`` draft with either
head (`drafters.eagle.drafter`).

Aux layer ids (``eagle_config.eagle_aux_hidden_state_layer_ids``) name layer *inputs*, as vLLM and
SpecForge capture them: id i is the output of layer i - 1, jfbench's tap i - 1 (id 0: the embeddings,
`EMBEDDING_TAP`). vLLM collects them during its layer loop, so fc reads them in ascending layer
order whatever order the config lists. Without them the loaders take (2, L // 2, L - 3) on an
L-layer target.

    config.json  architectures ["LlamaForCausalLMEagle3"], model_type "llama", hidden_size,
                 intermediate_size, num_attention_heads, num_key_value_heads, head_dim?,
                 num_hidden_layers (1), rms_norm_eps, rope_theta, hidden_act "silu", vocab_size,
                 draft_vocab_size, target_hidden_size?, eagle_config {eagle_aux_hidden_state_layer_ids,
                 use_aux_hidden_state}, norm_before_residual?
    weights      fc.weight (H, 3 Ht), midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}.weight,
                 midlayer.self_attn.{q,k,v}_proj.weight (*, 2H), midlayer.self_attn.o_proj.weight,
                 midlayer.mlp.{gate,up,down}_proj.weight, norm.weight, lm_head.weight (Vd, H),
                 d2t (Vd,) int64, t2d (V,) bool, embed_tokens.weight (V, H) optional (else the target's)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors.torch import save_file
from torch import nn

from drafters.head_cache import ContextCache
from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.engine.attention import DEFAULT_ATTENTION, AttentionFn, get_attention
from jetflow_bench.engine.drafter import SequenceView
from jetflow_bench.engine.rope import Rotary, rotate
from jetflow_bench.engine.target import EMBEDDING_TAP
from jetflow_bench.heads.checkpoint import HeadInfo, TargetShape, load_tensors, read_json
from jetflow_bench.heads.head import HeadConfig, HeadMeter, KVStore, SwiGLU
from jetflow_bench.kernels.mask import TreeMask

if TYPE_CHECKING:
    from jetflow_bench.engine.target import TargetRunner

ARCHITECTURE = "LlamaForCausalLMEagle3"
DEFAULT_DEPTH = 7  # drafted depth when no option says otherwise (EAGLE-2/3's default tree depth)
AUX_COUNT = 3  # low, mid, high: fc's input is 3 * target_hidden wide in every public loader


@dataclass(frozen=True)
class Eagle3Layout:
    """What an EAGLE-3 config says beyond the decoder shape."""

    vocab_size: int  # the target's vocabulary
    draft_vocab_size: int
    target_hidden_size: int
    aux_layers: tuple[int, ...] | None  # layer inputs fc reads (None: the loaders' default)
    norm_before_residual: bool = False  # residual = hidden_norm(feature) instead of the feature


def is_eagle3(raw: dict) -> bool:
    """An EAGLE-3 config (SpecForge / vLLM layout) rather than a DFlash / jfbench one."""
    return any("eagle3" in a.lower() for a in raw.get("architectures") or ()) or (
        "dflash_config" not in raw and "draft_vocab_size" in raw
    )


def aux_tap(aux_id: int) -> int:
    """An aux layer id (the input of layer ``aux_id``) as jfbench's tap (a layer's output)."""
    return EMBEDDING_TAP if aux_id == 0 else aux_id - 1


def default_aux_layers(num_layers: int) -> tuple[int, ...]:
    """vLLM's and SpecForge's default aux layers on an L-layer target: (2, L // 2, L - 3)."""
    return (2, num_layers // 2, num_layers - 3)


def read_config(path: Path) -> tuple[dict, Eagle3Layout]:
    """Parse an EAGLE-3 config.json (the decoder keys stay in the raw dict)."""
    file = Path(path) / "config.json"
    raw = read_json(file, "pass a head directory in the SpecForge / vLLM EAGLE-3 layout")
    if not is_eagle3(raw):
        raise JfbenchError(f"{path} is not an EAGLE-3 head (no Eagle3 architecture, no draft_vocab_size): jfbench's own "
                           "eagle heads are another architecture (drafter eagle), which vLLM's eagle3 cannot run")
    eagle = raw.get("eagle_config") or {}
    if not eagle.get("use_aux_hidden_state", True):
        raise JfbenchError(f"{file}: use_aux_hidden_state is false; only EAGLE-3 heads that fuse aux layers are supported")
    if raw.get("num_hidden_layers", 1) != 1:
        raise JfbenchError(f"{file}: {raw['num_hidden_layers']} draft layers; EAGLE-3 heads with one (midlayer) are supported")
    if raw.get("hidden_act", "silu") != "silu":
        raise JfbenchError(f"{file}: hidden_act {raw['hidden_act']!r}; the EAGLE-3 layer supports silu")
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    if rope.get("rope_type", rope.get("type", "default")) != "default":
        raise JfbenchError(f"{file}: RoPE type {rope.get('rope_type', rope.get('type'))!r} is not supported (default RoPE only)")
    aux = eagle.get("eagle_aux_hidden_state_layer_ids") or raw.get("eagle_aux_hidden_state_layer_ids")
    try:
        layout = Eagle3Layout(
            vocab_size=raw["vocab_size"], draft_vocab_size=raw.get("draft_vocab_size") or raw["vocab_size"],
            target_hidden_size=raw.get("target_hidden_size") or raw["hidden_size"],
            aux_layers=tuple(aux) if aux else None, norm_before_residual=bool(raw.get("norm_before_residual", False)),
        )
    except KeyError as err:
        raise JfbenchError(f"{file} lacks the field {err.args[0]!r} that an EAGLE-3 head needs") from err
    return raw, layout


def head_config(raw: dict, taps: Sequence[int]) -> HeadConfig:
    """The decoder shape as jfbench's HeadConfig (block_size - 1 = the default drafted depth)."""
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    heads = raw["num_attention_heads"]
    return HeadConfig(
        hidden_size=raw["hidden_size"], intermediate_size=raw["intermediate_size"], num_layers=1, num_heads=heads,
        num_kv_heads=raw.get("num_key_value_heads") or heads, head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
        taps=tuple(taps), block_size=DEFAULT_DEPTH + 1, mode="causal", rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
        rope_theta=rope.get("rope_theta") or raw.get("rope_theta", 10_000.0), attention_bias=bool(raw.get("attention_bias", False)),
    )


class Eagle3Attention(nn.Module):
    """Llama attention whose q/k/v read the 2H-wide [embedding ; feature] input."""

    def __init__(self, cfg: HeadConfig) -> None:
        super().__init__()
        h, hd = cfg.hidden_size, cfg.head_dim
        self.q_heads, self.kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, hd
        self.q_proj = nn.Linear(2 * h, cfg.num_heads * hd, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(2 * h, cfg.num_kv_heads * hd, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(2 * h, cfg.num_kv_heads * hd, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(cfg.num_heads * hd, h, bias=False)

    def key_value(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, N, 2H) -> rotated keys and values (B, H_kv, N, hd)."""
        b, n, _ = x.shape
        k = self.k_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        return rotate(k, cos, sin), v


class Eagle3Layer(nn.Module):
    def __init__(self, cfg: HeadConfig, norm_before_residual: bool) -> None:
        super().__init__()
        h = cfg.hidden_size
        self.input_layernorm = nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.hidden_norm = nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.self_attn = Eagle3Attention(cfg)
        self.post_attention_layernorm = nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.mlp = SwiGLU(h, cfg.intermediate_size)
        self.norm_before_residual = norm_before_residual

    def attention_input(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, N, 2H) = [embedding ; feature] -> the attention's input (B, N, 2H) and the residual (B, N, H)."""
        embedding, feature = x.chunk(2, dim=-1)
        normed = self.hidden_norm(feature)
        residual = normed if self.norm_before_residual else feature
        return torch.cat([self.input_layernorm(embedding), normed], dim=-1), residual

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: TreeMask | None, store: KVStore, attend: AttentionFn
    ) -> torch.Tensor:  # (B, N, H) pre-norm output: the next step's feature
        b, n, _ = x.shape
        a, h = self.attention_input(x)
        attn = self.self_attn
        q = rotate(attn.q_proj(a).view(b, n, attn.q_heads, attn.head_dim).transpose(1, 2), cos, sin)  # (B, Hq, N, hd)
        keys, values = store.extend(0, *attn.key_value(a, cos, sin))  # (B, H_kv, T + N, hd)
        o = attend(q, keys, values, mask, attn.head_dim**-0.5)  # (B, Hq, N, hd)
        h = h + attn.o_proj(o.transpose(1, 2).reshape(b, n, -1))
        return h + self.mlp(self.post_attention_layernorm(h))


class Eagle3Head(nn.Module):
    """fc + midlayer + norm + draft LM head; the embedding is the checkpoint's or the target's.

    Speaks the interface `EagleDrafter` drafts with: ``eagle_inputs`` -> ``forward`` (pre-norm
    features, fed back) -> ``logits`` (over the target's vocabulary, -inf outside the draft vocabulary).
    """

    def __init__(
        self, cfg: HeadConfig, layout: Eagle3Layout, embed: nn.Embedding, attention: str = DEFAULT_ATTENTION,
        own_embedding: bool = False,
    ) -> None:
        super().__init__()
        self.cfg, self.layout = cfg, layout
        h = cfg.hidden_size
        self.fc = nn.Linear(len(cfg.taps) * layout.target_hidden_size, h, bias=False)
        self.layers = nn.ModuleList([Eagle3Layer(cfg, layout.norm_before_residual)])
        self.norm = nn.RMSNorm(h, eps=cfg.rms_norm_eps)
        self.lm_head = nn.Linear(h, layout.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(layout.draft_vocab_size, dtype=torch.long))
        self.embed_tokens = embed
        self.own_embedding = own_embedding  # False: the target's embedding, not saved with the head
        self.rotary = Rotary(cfg.head_dim, cfg.rope_theta)
        self._shared = (embed, self.lm_head)  # what `HeadMeter` counts as embedding and LM head
        self.attend = get_attention(attention, embed.weight.device)
        self.meter: HeadMeter | None = None

    def count_cost(self) -> HeadMeter:
        self.meter = HeadMeter(self)  # type: ignore[arg-type]  # reads fc, layers' k/v, the LM head
        return self.meter

    def fuse(self, taps: torch.Tensor) -> torch.Tensor:
        """Tapped target states (..., 3, Ht) -> features (..., H)."""
        if self.meter is not None:
            self.meter.add(2 * self.meter.context_params * taps.shape[:-2].numel())
        return self.fc(taps.flatten(-2))

    def eagle_inputs(self, tokens: torch.Tensor, parent_features: torch.Tensor) -> torch.Tensor:
        """tokens (B, N), features of the positions before them (B, N, H) -> entries (B, N, 2H)."""
        return torch.cat([self.embed_tokens(tokens).to(parent_features.dtype), parent_features], dim=-1)

    def context_kv(self, entries: torch.Tensor, positions: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Entries (B, T, 2H) at positions (B, T) -> the layer's (k, v), each (B, H_kv, T, hd)."""
        cos, sin = self.rotary(positions, entries.dtype)
        layer = self.layers[0]
        return [layer.self_attn.key_value(layer.attention_input(entries)[0], cos, sin)]

    def forward(self, x: torch.Tensor, positions: torch.Tensor, mask: TreeMask, store: KVStore) -> torch.Tensor:
        """Entries (B, N, 2H) at positions (B, N) -> pre-norm features (B, N, H)."""
        if self.meter is not None:
            self.meter.forward(x.shape[0], x.shape[1], mask.kv_len)
        return self.run(x, positions, mask, store, self.attend)

    @property
    def input_size(self) -> int:
        """Width of an entry input: [embedding ; feature]."""
        return 2 * self.cfg.hidden_size

    def run(
        self, x: torch.Tensor, positions: torch.Tensor, mask: TreeMask | None, store: KVStore, attend: AttentionFn
    ) -> torch.Tensor:
        """``forward`` without the cost meter (`DraftHead.run`)."""
        cos, sin = self.rotary(positions, x.dtype)
        return self.layers[0](x, cos, sin, mask, store, attend)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Pre-norm features (..., H) -> logits over the target vocabulary (..., V)."""
        if self.meter is not None:
            self.meter.add(self.meter.shape.lm_head_flops(hidden.shape[:-1].numel()))
        draft = self.lm_head(self.norm(hidden))  # (..., Vd)
        if self.layout.draft_vocab_size == self.layout.vocab_size and not self.d2t.any():
            return draft
        full = draft.new_full((*draft.shape[:-1], self.layout.vocab_size), float("-inf"))
        full[..., self.target_ids()] = draft
        return full

    def to_target(self, ids: torch.Tensor) -> torch.Tensor:
        """Identity: `logits` already spreads the draft vocabulary over the target's ids."""
        return ids

    def target_ids(self) -> torch.Tensor:
        """(Vd,) the target token of each draft token: d + d2t[d]."""
        return torch.arange(self.layout.draft_vocab_size, device=self.d2t.device) + self.d2t


class PairCache(ContextCache):
    """EAGLE-3's context cache: slot p holds the keys/values of entry (token p + 1, feature p).

    The newest feature waits in ``last_feature`` until its token's successor is committed: it pairs
    with the root and is drafted as the proposal's first entry. So after prefill over a T-token
    prompt the cache holds T - 2 entries and the root entry sits at position T - 2, as in vLLM.
    """

    started = False  # the first append has no earlier feature to pair with its first token

    @torch.inference_mode()
    def observe(self, seqs: Sequence[SequenceView], features: Sequence[torch.Tensor]) -> None:
        fused, counts = self.fuse(features)  # (B, n, H)
        lead = int(self.started)
        feats = torch.cat([self.last_feature[:, None], fused], dim=1) if lead else fused  # (B, lead + n, H)
        pairs = [c - 1 + lead for c in counts]  # entries that become complete in each row
        tokens = torch.zeros(len(seqs), max(pairs), dtype=torch.long, device=fused.device)  # (B, max pairs)
        for row, (seq, k) in enumerate(zip(seqs, pairs, strict=True)):
            if k:
                tokens[row, :k] = torch.tensor(seq.tokens[len(seq.tokens) - 1 - k : -1], device=fused.device)
        self.write_entries(self.head.eagle_inputs(tokens, feats[:, : max(pairs)]), pairs)
        self.last_feature = self.newest(fused, counts)
        self.started = True


def load_eagle3(path: Path, target: TargetRunner, attention: str = DEFAULT_ATTENTION) -> tuple[Eagle3Head, HeadInfo]:
    """Build an EAGLE-3 head from ``path`` for ``target``; a shape or vocabulary that does not fit
    the target is a one-line error naming it."""
    raw, layout = read_config(path)
    have = TargetShape.of(target)
    aux = layout.aux_layers or default_aux_layers(have.num_layers)
    where = f"EAGLE-3 head {path}"
    if layout.vocab_size != have.vocab_size:
        raise JfbenchError(f"{where} has vocab_size {layout.vocab_size} but target {target.name!r} has {have.vocab_size} tokens: use a head trained for this target")
    if layout.target_hidden_size != have.hidden_size:
        raise JfbenchError(f"{where} expects target hidden size {layout.target_hidden_size} but target {target.name!r} has {have.hidden_size}")
    if len(set(aux)) != AUX_COUNT or not all(0 <= a <= have.num_layers for a in aux):
        raise JfbenchError(f"{where}: aux layers {list(aux)} do not fit target {target.name!r} ({have.num_layers} layers): "
                           f"give {AUX_COUNT} distinct layer ids in 0..{have.num_layers} (eagle_config.eagle_aux_hidden_state_layer_ids)")
    cfg = head_config(raw, [aux_tap(a) for a in sorted(aux)])
    state = {k.replace("midlayer.", "layers.0."): v for k, v in load_tensors(Path(path)).items()}
    embed, own_embedding = target.embed, "embed_tokens.weight" in state
    if own_embedding:
        weight = state.pop("embed_tokens.weight")
        if weight.shape != (layout.vocab_size, cfg.hidden_size):
            raise JfbenchError(f"{where}: embed_tokens.weight is {tuple(weight.shape)}, expected ({layout.vocab_size}, {cfg.hidden_size})")
        embed = nn.Embedding.from_pretrained(weight, freeze=True)
    elif cfg.hidden_size != have.hidden_size:
        raise JfbenchError(f"{where} has hidden size {cfg.hidden_size} and no embed_tokens.weight, so it needs a target of hidden size {cfg.hidden_size} (target has {have.hidden_size})")
    t2d = state.pop("t2d", None)
    if "d2t" not in state and layout.draft_vocab_size != layout.vocab_size:
        raise JfbenchError(f"{where}: draft_vocab_size {layout.draft_vocab_size} < vocab_size {layout.vocab_size} but no d2t map in the weights")
    state.setdefault("d2t", torch.zeros(layout.draft_vocab_size, dtype=torch.long))
    _check_vocab_maps(where, state["d2t"], t2d, layout)
    head = Eagle3Head(cfg, layout, embed, attention, own_embedding)
    missing, unexpected = head.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith("embed_tokens.")]
    if missing or unexpected:
        raise JfbenchError(f"{where}: weights do not match the config (missing {sorted(missing)[:4]}, unexpected {sorted(unexpected)[:4]})")
    info = HeadInfo(Path(path), "published", "eagle3", TargetShape(None, layout.target_hidden_size, layout.vocab_size, None))
    return head.to(device=target.device, dtype=target.dtype).eval(), info


def _check_vocab_maps(where: str, d2t: torch.Tensor, t2d: torch.Tensor | None, layout: Eagle3Layout) -> None:
    if d2t.shape != (layout.draft_vocab_size,):
        raise JfbenchError(f"{where}: d2t has shape {tuple(d2t.shape)}, expected ({layout.draft_vocab_size},) = draft_vocab_size")
    ids = torch.arange(layout.draft_vocab_size) + d2t.long()
    if ids.min() < 0 or ids.max() >= layout.vocab_size or ids.unique().numel() != ids.numel():
        raise JfbenchError(f"{where}: d2t maps draft tokens outside the target vocabulary of {layout.vocab_size} or onto one token twice")
    if t2d is not None and (t2d.shape != (layout.vocab_size,) or not torch.equal(t2d.bool(), _t2d(ids, layout.vocab_size))):
        raise JfbenchError(f"{where}: t2d does not mark exactly the target tokens d2t maps to")


def _t2d(target_ids: torch.Tensor, vocab_size: int) -> torch.Tensor:
    mask = torch.zeros(vocab_size, dtype=torch.bool)
    mask[target_ids] = True
    return mask


def export_eagle3(source: Path, out: Path) -> Path:
    """Rewrite the EAGLE-3 head at ``source`` (any public spelling: ``model.`` prefixes, ``layers.0.``
    or ``midlayer.``, missing ``t2d``) as the folder vLLM's ``eagle3`` method and SpecForge load:
    ``midlayer.*`` weights, ``d2t`` with its ``t2d``, an explicit architecture. Weights are copied
    bit for bit."""
    raw, layout = read_config(source)
    tensors = {k.replace("layers.0.", "midlayer."): v.contiguous() for k, v in load_tensors(source).items() if k != "t2d"}
    d2t = tensors.setdefault("d2t", torch.zeros(layout.draft_vocab_size, dtype=torch.long))
    _check_vocab_maps(f"EAGLE-3 head {source}", d2t, None, layout)
    tensors["t2d"] = _t2d(torch.arange(layout.draft_vocab_size) + d2t, layout.vocab_size)
    config = {**raw, "architectures": [ARCHITECTURE], "model_type": "llama", "draft_vocab_size": layout.draft_vocab_size}
    if layout.aux_layers:  # vLLM reads eagle_config's list; it captures in ascending order anyway
        config["eagle_config"] = {**(raw.get("eagle_config") or {}), "use_aux_hidden_state": True,
                                  "eagle_aux_hidden_state_layer_ids": sorted(layout.aux_layers)}
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return out
