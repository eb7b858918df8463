"""Llama-style decoders: Llama, Mistral, Qwen2, Qwen3, SmolLM3, Granite, GLM and GLM-4, OLMo (all share Llama's
layout; Gemma's decoders, which do too, are in ``gemma``).

``model.layers[i].self_attn.{q,k,v,o}_proj``; grouped-query attention through ``num_key_value_heads``;
``head_dim`` may be set explicitly (Qwen3) rather than ``hidden_size // num_attention_heads``. Granite's
multipliers, GLM's partial rotary and Qwen3's per-head-size q/k norms act within a head, so slicing heads keeps them.
"""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.base import LLAMA_STYLE, Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, layer_norm_keys, one_count

LLAMA = Adapter(family="llama", **LLAMA_STYLE)  # type: ignore[arg-type]
GQA = dict(num_key_value_heads=2)  # the tiny models' 4 query heads over 2 key/value heads


def _smollm3_layers(config: Any) -> str | None:
    """llama.cpp's smollm3 graph leaves RoPE out of every 4th layer, as SmolLM3 ships; another pattern is refused."""
    pattern = [int((i + 1) % 4 != 0) for i in range(config.num_hidden_layers)]
    if list(getattr(config, "no_rope_layers", None) or pattern) != pattern:
        return "its layers without RoPE (no_rope_layers) are not every 4th, which llama.cpp's smollm3 graph fixes"
    return None


def granite_scales(writer: Any, config: Any) -> None:
    """Granite's scalar multipliers, read by llama.cpp's granite graph (``GraniteModel.set_gguf_parameters``)."""
    writer.add_attention_scale(float(config.attention_multiplier))
    writer.add_embedding_scale(float(config.embedding_multiplier))
    writer.add_residual_scale(float(config.residual_multiplier))
    writer.add_logit_scale(float(config.logits_scaling))


def _olmo(writer: Any, config: Any) -> None:
    layer_norm_keys(writer, config)
    if getattr(config, "clip_qkv", None):
        writer.add_clamp_kqv(float(config.clip_qkv))


register(
    Family("llama", LLAMA, TinyModel("LlamaConfig", "LlamaForCausalLM", GQA),
           Gguf("llama", permuted=True, k_quants=True), genai="llama"),
    Family("mistral", LLAMA, TinyModel("MistralConfig", "MistralForCausalLM", dict(GQA, sliding_window=None)),
           Gguf("llama", permuted=True, k_quants=True), genai="mistral"),
    Family("qwen2", LLAMA, TinyModel("Qwen2Config", "Qwen2ForCausalLM", GQA), Gguf("qwen2", k_quants=True),
           genai="qwen2"),
    Family("qwen3", LLAMA, TinyModel("Qwen3Config", "Qwen3ForCausalLM", dict(GQA, head_dim=16)),
           Gguf("qwen3", dense_only="llama.cpp's graph for per-layer head counts (deci) has no q/k norms, which Qwen3 "
                "needs", k_quants=True), genai="qwen3", note="per-head q/k norms"),
    Family("smollm3", LLAMA, TinyModel("SmolLM3Config", "SmolLM3ForCausalLM", GQA),
           Gguf("smollm3", permuted=True, dense_only=one_count("smollm3"), refuse=_smollm3_layers,
                holds=("blk.3.attn_q.weight", "smollm3.block_count"), variant={"num_hidden_layers": 4}),  # 3: no RoPE
           genai="smollm3"),
    Family("granite", LLAMA, TinyModel("GraniteConfig", "GraniteForCausalLM", dict(
        GQA, attention_multiplier=0.5, residual_multiplier=0.5, logits_scaling=2.0)),
        Gguf("granite", permuted=True, dense_only=one_count("granite", "scalar multipliers", "Granite"),
             keys=granite_scales, holds=("blk.0.attn_q.weight", "granite.logit_scale")), genai="granite"),
    Family("glm", LLAMA, TinyModel("GlmConfig", "GlmForCausalLM", dict(GQA, head_dim=16)),
           Gguf("chatglm", dense_only=one_count("chatglm"), holds=("blk.0.attn_q.bias", "chatglm.rope.dimension_count"))),
    Family("glm4", LLAMA, TinyModel("Glm4Config", "Glm4ForCausalLM", dict(GQA, head_dim=16)),
           Gguf("glm4", dense_only=one_count("glm4"), holds=("blk.0.post_attention_norm.weight",
                                                              "glm4.rope.dimension_count"))),
    Family("olmo", LLAMA, TinyModel("OlmoConfig", "OlmoForCausalLM", GQA),
           Gguf("olmo", permuted=True, dense_only=one_count("olmo", "weightless LayerNorm", "OLMo"), keys=_olmo,
                holds=("blk.0.attn_q.weight", "olmo.attention.layer_norm_epsilon")),
           genai="olmo"),
)
