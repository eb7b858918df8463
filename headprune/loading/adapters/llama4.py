"""Llama 4 (``Llama4ForCausalLM``, model type ``llama4_text``; and as shipped, ``Llama4ForConditionalGeneration``,
``llama4``): grouped-query attention laid out as Llama (``self_attn.{q,k,v,o}_proj``), chunked attention in three
layers of four, the fourth without RoPE (its queries scaled by position, every head alike), a weightless L2 norm of
each head's query and key; dense MLPs and mixtures of experts with a shared expert, whose routers and experts are
never touched.

Where the layers live: ``Llama4ForCausalLM`` names ``language_model`` its base model, which it does not have, so
transformers' ``base_model`` is the model itself and the layers are at ``model.layers``; the shipped wrapper has no
base model either, its language model's layers are at ``language_model.model.layers``, sized by
``config.text_config``, and its vision model and projector are never touched.

GGUF: llama.cpp's ``llama4`` graph (RoPE on adjacent pairs, as the checkpoint has them), which fixes the chunk
(8192 tokens), the layers without RoPE (every 4th), the query scale of those and takes one head count for every
layer: dense only. ONNX: transformers rotates queries and keys in complex numbers, which torch's ONNX exporter does
not take; the graph is traced with the same rotation in real numbers (``_REAL_ROPE``).
"""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.base import LLAMA_STYLE, VISION_LANGUAGE, Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gemma import VISION
from headprune.loading.adapters.gguf_spec import Gguf, one_count
from headprune.loading.adapters.llama import GQA
from headprune.loading.complex_rope import real_rope

LLAMA4_TEXT = Adapter(**dict(LLAMA_STYLE, family="llama4_text", layers_path="model.layers"))  # type: ignore[arg-type]
LLAMA4 = Adapter(**dict(VISION_LANGUAGE, family="llama4",  # type: ignore[arg-type]
                        layers_path="language_model.model.layers"))
# 2 experts, 1 a token, in layer 1 (layer 0 a dense MLP); chunks of 4 tokens; layer 1 without RoPE
_TEXT = dict(GQA, head_dim=16, intermediate_size_mlp=128, num_local_experts=2, interleave_moe_layer_step=2,
             attention_chunk_size=4, no_rope_layer_interval=2)
# Llama 4 Scout's RoPE (Llama 3.1's scaling), which llama.cpp's llama4 graph reads as rope_freqs
_SCOUT_ROPE = dict(rope_type="llama3", rope_theta=500000.0, factor=16.0, low_freq_factor=1.0, high_freq_factor=1.0,
                   original_max_position_embeddings=8192)


def _llama4_modeling() -> Any:
    from transformers.models.llama4 import modeling_llama4

    return modeling_llama4


_REAL_ROPE = real_rope(_llama4_modeling, "Llama4TextRotaryEmbedding", heads_axis=2)  # queries as (B, T, H, D)


def _keys(writer: Any, config: Any) -> None:
    """The converter's ``Llama4Model``: the experts (transformers' ``intermediate_size``; the dense MLPs'
    ``intermediate_size_mlp`` is the feed-forward length) and every how many layers they are."""
    writer.add_expert_count(int(config.num_local_experts))
    writer.add_expert_used_count(int(config.num_experts_per_tok))
    writer.add_expert_feed_forward_length(int(config.intermediate_size))
    writer.add_interleave_moe_layer_step(int(config.interleave_moe_layer_step))


def _fixed(config: Any) -> str | None:
    """What llama.cpp's llama4 graph fixes: chunks of 8192 tokens, every 4th layer without RoPE and unchunked, the
    query scale of those (floor 8192, scale 0.1), q/k norms unless 128 experts, experts every step-th layer."""
    layers, step = config.num_hidden_layers, config.interleave_moe_layer_step
    if config.attention_chunk_size != 8192:
        return f"its attention chunks are {config.attention_chunk_size} tokens, and llama.cpp's llama4 graph fixes 8192"
    if list(config.no_rope_layers) != [int((i + 1) % 4 != 0) for i in range(layers)]:
        return "its layers without RoPE (no_rope_layers) are not every 4th, which llama.cpp's llama4 graph fixes"
    if not config.attn_temperature_tuning or (config.floor_scale, config.attn_scale) != (8192, 0.1):
        return "its query scale without RoPE is not llama.cpp's (floor 8192, scale 0.1)"
    if bool(config.use_qk_norm) != (config.num_local_experts != 128):
        return "its q/k norms are not llama.cpp's choice (used unless the model has 128 experts)"
    if list(config.moe_layers) != list(range(step - 1, layers, step)):
        return "its mixture-of-experts layers are not every interleave_moe_layer_step-th, as llama.cpp's graph has"
    return None


register(
    Family("llama4_text", LLAMA4_TEXT, TinyModel("Llama4TextConfig", "Llama4ForCausalLM", _TEXT),
           Gguf("llama4", dense_only=one_count("llama4", "q/k norms or experts", "Llama 4"), keys=_keys,
                refuse=_fixed, experts="columns", rope_freqs=True, ffn_length=lambda c: int(c.intermediate_size_mlp),
                holds=("blk.1.ffn_gate_shexp.weight", "llama4.interleave_moe_layer_step"),
                variant={"num_hidden_layers": 4, "attention_chunk_size": 8192, "no_rope_layer_interval": 4,
                         "rope_parameters": _SCOUT_ROPE}, refused=({}, "fixes 8192")),
           note="chunked layers and layers without RoPE; routers and experts untouched", traceable=_REAL_ROPE),
    Family("llama4", LLAMA4, TinyModel("Llama4Config", "Llama4ForConditionalGeneration", dict(
        text_config=_TEXT, vision_config=dict(  # a 56 x 56 image: 4 x 4 patches, shuffled into 4 image tokens
            VISION, intermediate_size=128, image_size=56, vision_output_dim=32, projector_input_dim=32,
            projector_output_dim=32), image_ids=("image_token_index", "boi_token_index", "eoi_token_index"))),
        note="Llama 4 Scout and Maverick as shipped; the vision model kept", traceable=_REAL_ROPE),
)
