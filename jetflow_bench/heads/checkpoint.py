"""Draft-head checkpoints: jfbench's own format and released DFlash / JetSpec heads.

A checkpoint is a directory with ``config.json`` and ``model.safetensors`` (or shards). Both
formats share the architecture keys of the released heads, so one reader serves both:

    config.json (jfbench)                        released DFlash / JetSpec heads
      "format": "jfbench-head", "drafter",         (no "format" key)
      "head_mode", "eagle_input",
      "target": {name, hidden_size, vocab_size,    "num_target_layers", "vocab_size",
                 num_layers},                       "target_hidden_size" (optional)
      "training": {...}
      hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads,
      head_dim, rms_norm_eps, rope_theta, attention_bias, block_size
      "dflash_config": {target_layer_ids, mask_token_id, causal flag*}
    model.safetensors
      fc.weight, hidden_norm.weight, norm.weight, layers.{i}.self_attn.{q,k,v,o}_proj.weight,
      layers.{i}.self_attn.{q,k}_norm.weight, layers.{i}.mlp.{gate,up,down}_proj.weight,
      layers.{i}.{input,post_attention}_layernorm.weight
      + mask_embedding (+ input_proj.weight for EAGLE)   released heads: MASK = embed[mask_token_id]
      + d2t (N target ids) when "draft_vocab_size" is N (a reduced draft vocabulary, see jetflow_bench.heads.head)

*The causal flag is spelled ``is_causal`` (top level or in dflash_config), ``causal`` or
``causal_head`` (JetSpec) by the different releases; absent means bidirectional (DFlash).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save_file

from jetflow_bench.core.errors import JfbenchError
from jetflow_bench.core.progress import say
from jetflow_bench.heads.head import DraftHead, HeadConfig

if TYPE_CHECKING:
    from jetflow_bench.engine.target import TargetRunner

FORMAT = "jfbench-head"
FORMAT_VERSION = 1
WEIGHTS = "model.safetensors"
MASK_FILE = "mask_embedding.pt"  # a released head's own MASK vector (vLLM's DFlash loader reads it)
CAUSAL_KEYS = ("is_causal", "causal", "causal_head")


@dataclass(frozen=True)
class TargetShape:
    """What a head needs from its target; None where a checkpoint does not say."""

    name: str | None
    hidden_size: int | None
    vocab_size: int | None
    num_layers: int | None

    @classmethod
    def of(cls, target: TargetRunner) -> TargetShape:
        return cls(target.name, target.config.hidden_size, target.embed.num_embeddings, len(target.layers))

    def describe(self) -> str:
        return f"hidden size {self.hidden_size}, vocab {self.vocab_size}, {self.num_layers} layers"


@dataclass(frozen=True)
class HeadInfo:
    """A checkpoint's identity beyond the architecture."""

    path: Path
    source: str  # "jfbench" | "published"
    drafter: str | None  # the drafter it was trained for (None: released block head)
    target: TargetShape
    training: dict[str, Any] = field(default_factory=dict)


def config_json(head: DraftHead, drafter: str, target: TargetShape, training: dict[str, Any]) -> dict:
    """The config.json of a jfbench head (a superset of the released layout)."""
    cfg = head.cfg
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "drafter": drafter,
        "head_mode": cfg.mode,
        "eagle_input": cfg.eagle_input,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "attention_bias": cfg.attention_bias,
        "block_size": cfg.block_size,
        "draft_vocab_size": cfg.draft_vocab,
        "vocab_size": target.vocab_size,
        "num_target_layers": target.num_layers,
        "dflash_config": {
            "target_layer_ids": list(cfg.taps),
            "mask_token_id": cfg.mask_token_id,
            "is_causal": cfg.mode == "causal",
        },
        "target": {
            "name": target.name, "hidden_size": target.hidden_size,
            "vocab_size": target.vocab_size, "num_layers": target.num_layers,
        },
        "training": training,
    }


def save_head(head: DraftHead, out: Path, drafter: str, target: TargetShape, training: dict[str, Any]) -> Path:
    """Write config.json + model.safetensors into ``out`` (created if needed)."""
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous().cpu() for k, v in head.state_dict().items()}
    save_file(tensors, str(out / WEIGHTS))
    (out / "config.json").write_text(json.dumps(config_json(head, drafter, target, training), indent=1) + "\n")
    return out


def read_json(file: Path, fix: str) -> dict:
    """A head's config.json; unreadable -> one line naming the file and ``fix``."""
    try:
        return json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise JfbenchError(f"cannot read draft-head config {file} ({err}): {fix}") from err


def read_config(path: Path) -> tuple[HeadConfig, HeadInfo]:
    """Parse a checkpoint's config.json (either format) without loading weights."""
    file = Path(path) / "config.json"
    raw = read_json(file, "pass a head directory made by `jfbench train`")
    if raw.get("format") == FORMAT:
        return _architecture(raw, file, raw["head_mode"]), HeadInfo(
            Path(path), "jfbench", raw["drafter"], TargetShape(**raw["target"]), raw.get("training", {})
        )
    if "dflash_config" not in raw:
        raise JfbenchError(f"{file} is neither a jfbench head nor a DFlash/JetSpec head (no 'dflash_config' block)")
    return _architecture(raw, file, _published_mode(raw)), HeadInfo(
        Path(path), "published", None,
        TargetShape(
            None, raw.get("target_hidden_size") or raw["dflash_config"].get("target_hidden_size") or raw.get("hidden_size"),
            raw.get("vocab_size"), raw.get("num_target_layers"),
        ),
    )


def head_origin(path: Path) -> tuple[str | None, str | None]:
    """(the drafter a jfbench head was trained as, the fingerprint of the target it was trained on),
    read from its config.json alone; None for what a checkpoint does not record (released heads
    record neither, heads trained before the fingerprint was kept lack the second)."""
    raw = read_json(Path(path) / "config.json", "pass a head directory made by `jfbench train`")
    if raw.get("format") != FORMAT:
        return None, None
    return raw.get("drafter"), (raw.get("training") or {}).get("target_fingerprint")


def _published_mode(raw: dict) -> str:
    block = raw["dflash_config"]
    for source in (raw, block):
        for key in CAUSAL_KEYS:
            if source.get(key) is not None:
                return "causal" if source[key] else "bidirectional"
    return "bidirectional"


def _architecture(raw: dict, file: Path, mode: str) -> HeadConfig:
    block = raw["dflash_config"]
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    if rope.get("rope_type", "default") != "default":
        raise JfbenchError(f"{file}: RoPE type {rope['rope_type']!r} is not supported by the draft head (default RoPE only)")
    if any(t != "full_attention" for t in raw.get("layer_types") or ()):
        raise JfbenchError(f"{file}: sliding-window draft layers are not supported")
    try:
        num_layers = raw["num_hidden_layers"]
        taps = block.get("target_layer_ids") or default_taps(raw["num_target_layers"], num_layers)
        block_size = raw.get("block_size") or block["block_size"]
        return HeadConfig(
            hidden_size=raw["hidden_size"], intermediate_size=raw["intermediate_size"], num_layers=num_layers,
            num_heads=raw["num_attention_heads"], num_kv_heads=raw.get("num_key_value_heads") or raw["num_attention_heads"],
            head_dim=raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"],
            taps=tuple(taps), block_size=block_size, mode=mode, mask_token_id=block.get("mask_token_id", raw.get("mask_token_id")),
            eagle_input=bool(raw.get("eagle_input", False)), rms_norm_eps=raw.get("rms_norm_eps", 1e-6),
            rope_theta=rope.get("rope_theta") or raw.get("rope_theta", 1_000_000.0),
            attention_bias=bool(raw.get("attention_bias", False)), draft_vocab=raw.get("draft_vocab_size"),
        )
    except KeyError as err:
        raise JfbenchError(f"{file} lacks the field {err.args[0]!r} that a draft head needs") from err


def default_taps(num_target_layers: int, count: int) -> list[int]:
    """K target layers spread evenly: DFlash's rule (L // 2 for one, else layers 1 .. L-3) where the
    target is deep enough; on shallower targets layers 0 .. L-2, so the final layer (whose output is
    the LM head's input, already the target's answer) is never fused; all of 0 .. L-1 only when
    there are no layers to spare.

    Examples: (36, 5) -> [1, 9, 17, 25, 33]; (14, 3) -> [1, 6, 11]; (6, 3) -> [0, 2, 4]; (3, 3) -> [0, 1, 2].
    """
    if count == 1:
        return [num_target_layers // 2]
    if num_target_layers >= count + 4:
        start, end = 1, num_target_layers - 3
    elif num_target_layers > count:
        start, end = 0, num_target_layers - 2
    else:
        start, end = 0, num_target_layers - 1
    return [int(round(start + i * (end - start) / (count - 1))) for i in range(count)]


def check_target(cfg: HeadConfig, info: HeadInfo, target: TargetRunner) -> None:
    """A head built for another target is a one-line user error naming both."""
    have = TargetShape.of(target)
    want = info.target
    mismatch = any(
        w is not None and w != h
        for w, h in ((want.hidden_size, have.hidden_size), (want.vocab_size, have.vocab_size), (want.num_layers, have.num_layers))
    ) or cfg.hidden_size != have.hidden_size or max(cfg.taps) >= (have.num_layers or 0)
    if mismatch:
        trained_for = f" ({want.name})" if want.name else ""
        raise JfbenchError(
            f"draft head {info.path} expects a target with {want.describe()}{trained_for}, but target {target.name!r} "
            f"has {have.describe()}: train a head for this target (jfbench train --target ...) or pass its own --target"
        )


def load_head(path: Path, target: TargetRunner, attention: str = "sdpa") -> tuple[DraftHead, HeadInfo]:
    """Build the head from ``path`` on ``target``'s device/dtype, sharing its embedding and LM head."""
    cfg, info = read_config(path)
    check_target(cfg, info, target)
    head = DraftHead(cfg, target.embed, target.lm_head, attention)
    state = load_tensors(Path(path))
    if info.source == "published" and "mask_embedding" not in state:
        if cfg.mask_token_id is None:
            raise JfbenchError(f"{path}/config.json has no mask_token_id: the head cannot draft without a MASK input")
        state["mask_embedding"] = _released_mask(Path(path), cfg.mask_token_id, target)
    missing, unexpected = head.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise JfbenchError(
            f"{path}: weights do not match the config (missing {sorted(missing)[:4]}, unexpected {sorted(unexpected)[:4]})"
        )
    if head.d2t is not None and int(head.d2t.max()) >= target.embed.num_embeddings:
        raise JfbenchError(f"{path}: its draft vocabulary names token ids beyond the target's vocabulary: pass its own --target")
    return head.to(device=target.device, dtype=target.dtype).eval(), info


def _released_mask(path: Path, mask_token_id: int, target: TargetRunner) -> torch.Tensor:
    """A released head's MASK input: its ``mask_embedding.pt`` (a tensor, or {"mask_token_id",
    "embedding"}, as vLLM reads it) or else the target's embedding of the mask token."""
    file = path / MASK_FILE
    if not file.exists():
        return target.embed.weight[mask_token_id].detach().cpu()
    state = torch.load(file, map_location="cpu", weights_only=True)
    if isinstance(state, dict):
        if state.get("mask_token_id", mask_token_id) != mask_token_id:
            raise JfbenchError(f"{file} is for mask token {state['mask_token_id']} but config.json says {mask_token_id}")
        state = state["embedding"]
    return state.reshape(-1)


def export_dflash(source: Path, out: Path) -> Path:
    """Write a block head (jfbench's dflash / jetflow, or a released one) as the folder vLLM's
    ``dflash`` method loads (``DFlashQwen3ForCausalLM``): the released config keys, the weights
    without jfbench's MASK tensor, and that trained MASK vector as ``mask_embedding.pt``, which
    vLLM substitutes for the mask token's embedding. The embedding and LM head stay the target's.
    vLLM's dflash has no reduced draft vocabulary, so a head trained with one (``d2t``) is written
    without it and drafts over the target's whole vocabulary there (said on stderr)."""
    cfg, info = read_config(source)
    if cfg.eagle_input:
        raise JfbenchError(f"{source} is an EAGLE head: export it as eagle3 only if it is an EAGLE-3 head; "
                           "vLLM's dflash runs block heads (jfbench train --drafter dflash or jetflow)")
    state = load_tensors(Path(source))
    mask = state.pop("mask_embedding", None)
    if state.pop("d2t", None) is not None:
        say(f"note: {source} drafts over {cfg.draft_vocab} tokens; vLLM's dflash has no reduced draft vocabulary, so "
            "the export drafts over the target's whole vocabulary and its drafts can differ from jfbench's")
    rope = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    config = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_act": "silu",
        "hidden_size": cfg.hidden_size, "intermediate_size": cfg.intermediate_size, "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim,
        "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta, "rope_parameters": rope,
        "attention_bias": cfg.attention_bias, "max_position_embeddings": 32768, "tie_word_embeddings": False,
        "vocab_size": info.target.vocab_size, "num_target_layers": info.target.num_layers,
        "target_hidden_size": info.target.hidden_size or cfg.hidden_size, "block_size": cfg.block_size,
        "is_causal": cfg.mode == "causal",  # vLLM reads this before dflash_config.causal
        "dflash_config": {"target_layer_ids": list(cfg.taps), "mask_token_id": cfg.mask_token_id,
                          "causal": cfg.mode == "causal", "block_size": cfg.block_size},
    }
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state.items()}, str(out / WEIGHTS))
    if mask is not None:
        torch.save({"mask_token_id": cfg.mask_token_id, "embedding": mask}, out / MASK_FILE)
    (out / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return out


def load_tensors(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of a (possibly sharded) safetensors checkpoint, with a ``model.`` prefix removed."""
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise JfbenchError(f"{path} holds no *.safetensors weights")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    return {k.removeprefix("model."): v for k, v in state.items()}
