"""Model shapes the cost model needs: weights read, FLOPs and KV bytes of one forward.

A `ModelShape` is the handful of config.json fields that fix a decoder's cost. The target comes from
a preset (`qwen3-8b`, `qwen3-30b-a3b`, `llama3-8b`, see presets.toml), a local model folder or a hub
id already in the local cache (never downloaded: projections run offline). A draft head is costed at
the projection target's width with the head's own depth and tap count (`head_shape`), because a
head trained for that target would share its hidden size, attention layout and LM head.

Counting (per forward over T = N·b tokens, context L per sequence, p bytes per parameter):
    attention params / layer  = H·(nq·d) + 2·H·(nkv·d) + (nq·d)·H        (q, k, v, o projections)
    dense MLP / layer         = 3·H·I                                    (SwiGLU gate, up, down)
    MoE MLP / layer           = H·E (router) + touched(T)·3·H·Im,  touched(T) = E·(1 − (1 − k/E)^T)
                                (experts hit by T tokens routed uniformly and independently)
    LM head                   = H·V  (read even when tied: it is the matrix the logits multiply)
    weight bytes              = p · (layers·(attention + MLP read) + LM head + fusion fc)
    FLOPs                     = 2·T·(layers·(attention + active MLP) + LM head + fc)
                                + 4·T·layers·nq·d·(L + N)                (scores and values)
    KV bytes                  = p · 2·layers·nkv·d · b·(L + N)          (cache read + new entries)
The token embedding is a lookup of T rows, not a matrix read, so it is left out.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from jetflow_bench.core.errors import JfbenchError

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}  # bytes per element of each dtype


@cache
def presets() -> dict[str, Any]:
    """The parsed presets.toml shipped with the package (hardware, targets, assumptions)."""
    return tomllib.loads(resources.files("jetflow_bench.projection").joinpath("presets.toml").read_text())


@dataclass(frozen=True)
class ModelShape:
    """The config.json fields that fix one decoder's forward cost."""

    name: str
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    intermediate: int  # dense SwiGLU width (unused when experts > 0)
    vocab: int
    experts: int = 0  # routed experts per MoE layer; 0 = dense
    experts_per_token: int = 0
    expert_intermediate: int = 0
    fusion_inputs: int = 0  # draft heads: tapped target layers concatenated into the fc projection

    @property
    def attention_params(self) -> int:
        q = self.hidden * self.q_heads * self.head_dim
        return 2 * q + 2 * self.hidden * self.kv_heads * self.head_dim  # q + o, k + v

    @property
    def lm_head_params(self) -> int:
        return self.hidden * self.vocab

    @property
    def fusion_params(self) -> int:
        return self.fusion_inputs * self.hidden * self.hidden

    @property
    def expert_params(self) -> int:
        return 3 * self.hidden * self.expert_intermediate

    def experts_touched(self, tokens: int) -> float:
        """Expected distinct experts per layer hit by `tokens` tokens (uniform, independent routing)."""
        if not self.experts:
            return 0.0
        return self.experts * (1.0 - (1.0 - self.experts_per_token / self.experts) ** tokens)

    def mlp_params_read(self, tokens: int) -> float:
        if not self.experts:
            return 3 * self.hidden * self.intermediate
        return self.hidden * self.experts + self.experts_touched(tokens) * self.expert_params

    def mlp_params_active(self) -> int:
        """MLP parameters one token multiplies (its k experts and the router for a MoE)."""
        if not self.experts:
            return 3 * self.hidden * self.intermediate
        return self.hidden * self.experts + self.experts_per_token * self.expert_params

    def weight_bytes(self, tokens: int, dtype_bytes: int) -> float:
        per_layer = self.attention_params + self.mlp_params_read(tokens)
        return dtype_bytes * (self.layers * per_layer + self.lm_head_params + self.fusion_params)

    def flops(self, tokens_per_seq: int, batch: int, context: int) -> float:
        t = tokens_per_seq * batch
        dense = self.layers * (self.attention_params + self.mlp_params_active()) + self.lm_head_params
        attention = 4 * t * self.layers * self.q_heads * self.head_dim * (context + tokens_per_seq)
        return 2 * t * (dense + self.fusion_params) + attention

    def kv_bytes(self, tokens_per_seq: int, batch: int, context: int, dtype_bytes: int) -> float:
        per_token = 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes
        return per_token * batch * (context + tokens_per_seq)

    def overhead_units(self) -> int:
        """Fixed-cost units of one forward: every layer plus the LM head and sampling."""
        return self.layers + 1

    def identity(self) -> dict[str, int]:
        """The fields a calibration file records to recognise its target."""
        return {"layers": self.layers, "hidden": self.hidden, "vocab": self.vocab, "q_heads": self.q_heads,
                "kv_heads": self.kv_heads, "intermediate": self.intermediate, "experts": self.experts}


def shape_from_config(config: dict[str, Any], name: str) -> ModelShape:
    """A ModelShape from Hugging Face config.json fields (Llama / Qwen2 / Qwen3 / Qwen3-MoE)."""
    try:
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        experts = int(config.get("num_experts") or 0)
        return ModelShape(
            name=name, layers=int(config["num_hidden_layers"]), hidden=hidden, q_heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            intermediate=int(config.get("intermediate_size") or 0), vocab=int(config["vocab_size"]),
            experts=experts, experts_per_token=int(config.get("num_experts_per_tok") or 0) if experts else 0,
            expert_intermediate=int(config.get("moe_intermediate_size") or 0) if experts else 0,
        )
    except (KeyError, TypeError, ValueError) as err:
        raise JfbenchError(
            f"target config {name!r} lacks the field {err} a decoder shape needs: pass a Llama/Qwen-style config.json"
        ) from err


def target_shape(spec: str) -> ModelShape:
    """The shape (layers, widths, heads) of the target `spec` names, for the projection: a preset name,
    a folder holding config.json, or a hub id found in the local HF cache (never a download)."""
    known = presets()["target"]
    if spec in known:
        return shape_from_config(known[spec], spec)
    folder = Path(spec).expanduser()
    if (folder / "config.json").is_file():
        return shape_from_config(json.loads((folder / "config.json").read_text()), spec)
    cached = _cached_hub_config(spec) if "/" in spec and not folder.exists() else None
    if cached is not None:
        return shape_from_config(cached, spec)
    raise JfbenchError(
        f"unknown target config {spec!r}: use a preset ({', '.join(sorted(known))}), a model folder with "
        "config.json, or a hub id already in the local Hugging Face cache"
    )


def _cached_hub_config(hub_id: str) -> dict[str, Any] | None:
    """config.json of `hub_id` from the local Hugging Face cache only (projection never downloads)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    path = try_to_load_from_cache(hub_id, "config.json")
    return json.loads(Path(path).read_text()) if isinstance(path, str) else None


def head_shape(target: ModelShape, layers: int, taps: int) -> ModelShape:
    """A draft head for `target`: `layers` dense decoder layers of the target's width and attention
    layout (a MoE target's head uses the config's dense `intermediate_size`), the target's LM head,
    and an fc fusing `taps` tapped layers."""
    return replace(target, name=f"{layers}-layer head of {target.name}", layers=layers, experts=0,
                   experts_per_token=0, expert_intermediate=0, fusion_inputs=taps)
