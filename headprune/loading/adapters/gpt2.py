"""GPT-2: ``transformer.h[i].attn`` with a fused ``c_attn`` and a ``Conv1D`` output projection ``c_proj``."""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.base import Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import GELU_TABLE, GPT_GELU, Gguf, layer_norm_keys, one_count

GPT2 = Adapter(
    family="gpt2",
    layers_path="h",
    attention_path="attn",
    output_projection_path="attn.c_proj",
    projection_is_conv1d=True,
    qkv_layout="gpt2",
    qkv_paths=("attn.c_attn",),
    count_attrs=("num_heads",),
)


def _attention(config: Any) -> str | None:
    """llama.cpp's gpt2 graph scales every layer's scores by 1/sqrt(head size)."""
    if getattr(config, "scale_attn_by_inverse_layer_idx", False) or not getattr(config, "scale_attn_weights", True):
        return ("its attention scores are scaled otherwise than by 1/sqrt(head size) (scale_attn_weights, "
                "scale_attn_by_inverse_layer_idx), which llama.cpp's gpt2 graph fixes")
    return None


register(Family("gpt2", GPT2, TinyModel("GPT2Config", "GPT2LMHeadModel", dict(n_embd=64, n_layer=2, n_head=4,
                                                                             n_positions=256)),
                Gguf("gpt2", dense_only=one_count("gpt2") + " (its fused attn_qkv is sized by it)",
                     keys=layer_norm_keys, refuse=_attention, activation=GPT_GELU, tolerance=GELU_TABLE, gated=False,
                     rotary=False, ffn_length=lambda c: int(c.n_inner or 4 * c.n_embd),
                     holds=("position_embd.weight", "gpt2.attention.layer_norm_epsilon")),  # learned positions
                genai="gpt2"))
