"""Hunyuan dense (``HunYuanDenseV1ForCausalLM``, model type ``hunyuan_v1_dense``: Hunyuan 0.5B-7B): laid out as Llama
(``model.layers[i].self_attn.{q,k,v,o}_proj``, grouped-query attention) with RMS norms of each head's query and key
after RoPE (``query_layernorm``/``key_layernorm``: one weight of the head's size, nothing to slice). Its RoPE as
shipped ("dynamic" with a fixed ``alpha``) is a static NTK base, ``theta * alpha ** (d / (d - 2))``.

GGUF: llama.cpp's ``hunyuan-dense`` graph (which scales the base by ``rope.scaling.alpha``), one head count for every
layer: dense only.
"""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, one_count
from headprune.loading.adapters.llama import GQA, LLAMA

_ALPHA = dict(rope_type="dynamic", rope_theta=10000.0, alpha=1000.0, factor=1.0)  # as Hunyuan ships its RoPE


def _keys(writer: Any, config: Any) -> None:
    """The NTK alpha, which llama.cpp's graph turns into the base as transformers does."""
    alpha = (getattr(config, "rope_parameters", None) or {}).get("alpha")
    if alpha:
        writer.add_rope_scaling_alpha(float(alpha))


def _attention(config: Any) -> str | None:
    if getattr(config, "attention_bias", False):
        return "its attention has biases (attention_bias), which llama.cpp's hunyuan-dense graph has no place for"
    return None


register(Family(
    "hunyuan_v1_dense", LLAMA, TinyModel("HunYuanDenseV1Config", "HunYuanDenseV1ForCausalLM", dict(
        GQA, head_dim=16, rope_parameters=_ALPHA)),
    Gguf("hunyuan-dense", dense_only=one_count("hunyuan-dense", "q/k norms", "Hunyuan"), keys=_keys,
         refuse=_attention, holds=("blk.0.attn_q_norm.weight", "hunyuan-dense.rope.scaling.alpha"),
         refused=({"attention_bias": True}, "attention_bias")),
    genai="hunyuandensev1", note="per-head q/k norms after RoPE"))
