"""Gemma 4 (``gemma4_text``) and Gemma 4 as shipped (``Gemma4ForConditionalGeneration``, model type ``gemma4``: its
language model beside a vision and an audio tower).

Heads: each layer's query heads (``model.layers[i].self_attn.{q,k,v,o}_proj``), over grouped key/value heads. The
layers differ: a sliding layer's heads are ``head_dim`` wide over ``num_key_value_heads``, a full-attention layer's
``global_head_dim`` over ``num_global_key_value_heads`` where keys are values (``attention_k_eq_v``: such a layer has
no ``v_proj``, its values are its keys before their norm and rotation), which transformers' config gives each layer
in its ``per_layer_config`` (read layer by layer: ``base.layer_configs``). The query count is one for every layer.
The last ``num_kv_shared_layers`` layers have no keys and values of their own: each reads those of the last earlier
layer of its type (``kv_sharing_modes``: "store" and "reuse"), which is their ``kv_source``; the plan keeps in that
layer every key/value head a reader's kept heads read (``surgery.plan``). The q/k norms (one weight of a head's
width, shared by the heads), the weightless v norm, the per-layer embeddings (PLE), ``layer_scalar`` and the MoE
block act within a head or beside the heads: untouched. The towers of ``gemma4`` are never touched.

A sliced export loads with its own code (``modeling_headprune.py``), a dense one with stock transformers: its
``per_layer_config`` takes a layer's key/value count and head size, but not its query count (the attention reads
the model-wide one, and a per-layer one is refused as ambiguous), and only one override for every layer of a type
(the rotary embedding reads a type's), so no exact prune of a few heads can be written in it.

ONNX: ``gemma4_text`` is a decoder for ONNX Runtime GenAI's ``gemma4_text`` type, each layer's keys and values in its
own count and size, the sharing layers without a cache of their own (:mod:`headprune.exporter.onnx.decoder_cache`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from headprune.errors import UnsupportedModelError
from headprune.heads import LayerHeads
from headprune.loading.adapters.base import LLAMA_STYLE, VISION_LANGUAGE, Adapter, layer_configs
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import TANH_GELU, Gguf


def kv_sources(config: Any) -> list[int | None]:
    """Each layer's ``kv_source``: for one of the last ``num_kv_shared_layers`` layers, which reuse keys and values,
    the last earlier layer of its type, which stores them (transformers' rule: 5.25's ``kv_sharing_modes``, 5.17's
    ``store_full_length_kv``); None for the others.

    Raises:
        UnsupportedModelError: a reusing layer has no earlier layer of its type (every layer reuses: an assistant
            model, which reads another model's keys and values).
    """
    count = int(config.num_hidden_layers)
    first = count - int(getattr(config, "num_kv_shared_layers", 0) or 0)
    store = {kind: i for i, kind in enumerate(config.layer_types[:first])}
    if any(kind not in store for kind in config.layer_types[first:]):
        raise UnsupportedModelError(f"{config.model_type}: its key/value-sharing layers (the last {count - first}) "
                                    "read keys and values no earlier layer of their type computes (an assistant model "
                                    "reads another model's): headprune prunes models whose layers compute what they "
                                    "read")
    return [None if i < first else store[kind] for i, kind in enumerate(config.layer_types)]


def _shared(config: Any, layer: int, heads: LayerHeads) -> LayerHeads:
    return replace(heads, kv_source=kv_sources(config)[layer])


def _sliding(config: Any) -> Any:
    """A sliding layer's config (its head size and key/value heads), or None where every layer is global."""
    return next((layer for kind, layer in zip(config.layer_types, layer_configs(config))
                 if kind == "sliding_attention"), None)


def _keys(writer: Any, config: Any) -> None:
    """The converter's keys (``Gemma4Model.set_gguf_parameters``): which layers slide and over what window, the
    sliding layers' head size and RoPE, the key/value-sharing layers, the per-layer embeddings' width, the soft cap
    and the experts."""
    sliding = _sliding(config)
    writer.add_sliding_window(int(config.sliding_window))
    writer.add_sliding_window_pattern([kind == "sliding_attention" for kind in config.layer_types])
    writer.add_shared_kv_layers(int(config.num_kv_shared_layers))
    writer.add_embedding_length_per_layer_input(int(config.hidden_size_per_layer_input or 0))
    head_dim = int(sliding.head_dim if sliding is not None else 0)
    writer.add_key_length_swa(head_dim)
    writer.add_value_length_swa(head_dim)
    writer.add_rope_dimension_count_swa(head_dim)
    writer.add_rope_freq_base_swa(float(config.rope_parameters.get("sliding_attention", {}).get("rope_theta", 1e4)))
    if config.final_logit_softcapping:
        writer.add_final_logit_softcapping(float(config.final_logit_softcapping))
    if config.enable_moe_block:
        writer.add_expert_count(int(config.num_experts))
        writer.add_expert_used_count(int(config.top_k_experts))
        writer.add_expert_feed_forward_length(int(config.moe_intermediate_size))


def _ffn(config: Any) -> int | list[int]:
    """The MLP's width: twice as wide in the key/value-sharing layers where ``use_double_wide_mlp`` (a width a
    layer)."""
    if not config.use_double_wide_mlp:
        return int(config.intermediate_size)
    return [int(config.intermediate_size) * (2 if source is not None else 1) for source in kv_sources(config)]


def _refuse(config: Any) -> str | None:
    """What llama.cpp's gemma4 graph fixes that a config can set otherwise."""
    rope = config.rope_parameters or {}
    full, sliding = rope.get("full_attention") or {}, rope.get("sliding_attention") or {}
    if set(config.layer_types) != {"sliding_attention", "full_attention"}:  # (none sliding: llama.cpp aborts)
        return "its layers are not sliding and full-attention ones, which llama.cpp's gemma4 graph takes both of"
    if full.get("rope_type") != "proportional" or float(full.get("factor", 1.0)) != 1.0:
        return "its full-attention layers' RoPE is not proportional and unscaled, as llama.cpp's gemma4 graph takes it"
    if sliding.get("rope_type", "default") != "default":
        return "its sliding layers' RoPE is not plain RoPE, as llama.cpp's gemma4 graph computes it"
    if config.attention_bias or config.use_bidirectional_attention == "all":
        return "its attention has biases or is bidirectional, which llama.cpp's gemma4 graph does not compute"
    if config.hidden_size_per_layer_input and config.vocab_size_per_layer_input != config.vocab_size:
        return "its per-layer embeddings' vocabulary is not its own, which llama.cpp's gemma4 graph reads"
    first = config.num_hidden_layers - config.num_kv_shared_layers  # llama.cpp: reuse layer first - 1 (full) or - 2
    fixed = [None if i < first else first - (2 if kind == "sliding_attention" else 1)
             for i, kind in enumerate(config.layer_types)]
    if config.num_kv_shared_layers and kv_sources(config) != fixed:
        return ("its key/value-sharing layers read other layers than llama.cpp's gemma4 graph gives them (the last "
                "two layers before them, full attention last)")
    return None


# The runtime gate (x the largest logit, at least 1) of Gemma 4's files: llama.cpp's float16 GELU table (gguf_spec's
# GELU_TABLE) runs twice a layer here (the MLP and the per-layer embeddings' gate). Measured on the suite's tiny
# model, seeds 0-5, nothing removed: 0.9e-3 to 1.2e-3 (1.5e-4 to 2e-4 with the same float16 rounding of GELU done in
# torch); with heads removed up to 2.3e-3.
GELU_TABLE_PLE = 5e-3


# The router's input scale and its per-expert output scale, under the names llama.cpp reads them by (the converter's
# Gemma4Model.modify_tensors: ffn_gate_inp.scale, ffn_down_exps.scale)
ROUTER_SCALES = (("router.scale", "router.proj.scale"), ("router.per_expert_scale", "experts.down_proj.scale"))

GEMMA4_TEXT = Adapter(family="gemma4_text", **LLAMA_STYLE, layer_heads=_shared)  # type: ignore[arg-type]
GEMMA4 = Adapter(family="gemma4", **VISION_LANGUAGE, layer_heads=_shared)  # type: ignore[arg-type]

# The tiny models' language model, as Gemma 4 E2B/E4B and 26B/31B are built: a sliding layer (4 query heads of 16 over
# 2 key/value heads) and a full-attention layer (heads of 32 over 1 key/value head, keys as values) that keep their own
# keys and values, then one of each that reads them; per-layer embeddings of 8 a layer.
TEXT = dict(num_hidden_layers=4, layer_types=["sliding_attention", "full_attention"] * 2, head_dim=16,
            num_key_value_heads=2, global_head_dim=32, num_global_key_value_heads=1, attention_k_eq_v=True,
            num_kv_shared_layers=2, hidden_size_per_layer_input=8, sliding_window=4,
            vocab_sized=("vocab_size_per_layer_input",))
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
              head_dim=16, patch_size=4, pooling_kernel_size=2, position_embedding_size=64)
AUDIO = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, subsampling_conv_channels=[8, 4],
             conv_kernel_size=3, attention_chunk_size=4, attention_context_left=5, output_proj_dims=32,
             use_clipped_linears=False)
_NOTE = ("per-layer head sizes and key/value heads (sliding and full layers), keys as values, key/value-sharing "
         "layers (their source keeps what they read); sliced loads with its own code, dense with stock transformers")
register(
    Family("gemma4_text", GEMMA4_TEXT, TinyModel("Gemma4TextConfig", "Gemma4ForCausalLM", TEXT), note=_NOTE,
           genai="gemma4_text",
           gguf=Gguf("gemma4", per_layer=True, keys=_keys, refuse=_refuse, ffn_length=_ffn, activation=TANH_GELU,
                     renamed=ROUTER_SCALES, tolerance=GELU_TABLE_PLE, sliding_window=True,
                     holds=("per_layer_token_embd.weight", "gemma4.attention.shared_kv_layers"))),
    Family("gemma4", GEMMA4, TinyModel("Gemma4Config", "Gemma4ForConditionalGeneration", dict(
        text_config={k: v for k, v in TEXT.items() if k != "vocab_sized"}, vision_config=VISION,
        audio_config=AUDIO, vocab_sized=("vocab_size_per_layer_input",),
        image_ids=("image_token_id", "boi_token_id", "eoi_token_id", "audio_token_id", "boa_token_id",
                   "eoa_token_index", "video_token_id"))),
        note=_NOTE + "; Gemma 4 as shipped: the vision and audio towers kept"),
)
