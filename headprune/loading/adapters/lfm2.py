"""LFM2 (``lfm2``, Liquid AI's LFM2): short-convolution layers (``conv``: a gated depthwise convolution over the last
few tokens) and grouped-query attention layers (``config.layer_types`` ``conv``/``full_attention``).

An attention layer's heads are its query heads (``self_attn.{q,k,v}_proj`` and ``self_attn.out_proj``; the q/k
layer norms act on each head alike, one gain of ``head_dim``, so a head is removed exactly). Convolution layers have
no heads and are never touched; their state makes the grid recurrent, so an LFM2 is decoded plainly.

GGUF is refused in one line: llama.cpp's ``lfm2`` graph sizes the query and output projections by the width
(``{n_embd, n_embd}``), so only a dense file could be written, and headprune's writer does not write the
short-convolution tensors. ONNX is a logits graph; ONNX Runtime GenAI's ``lfm2`` decoder needs the convolution
states as inputs of their own, which headprune does not write.
"""

from __future__ import annotations

from typing import Any

from headprune.heads import ATTENTION
from headprune.loading.adapters.base import LLAMA_STYLE, Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.llama import GQA

CONV = "conv"  # a short-convolution layer: no heads headprune removes


def layer_kinds(config: Any) -> list[str]:
    """Each layer's kind: ``conv`` (without heads) or attention."""
    return [CONV if kind == CONV else ATTENTION for kind in config.layer_types]


# The tiny model: a convolution layer before two attention layers (4 query heads over 2 key/value heads).
TINY = dict(GQA, num_hidden_layers=3, layer_types=[CONV, "full_attention", "full_attention"],
            block_auto_adjust_ff_dim=False)
register(Family(
    "lfm2", Adapter(family="lfm2", **dict(LLAMA_STYLE, output_projection_path="self_attn.out_proj"),  # type: ignore
                    layer_kinds=layer_kinds),
    TinyModel("Lfm2Config", "Lfm2ForCausalLM", TINY),
    note="attention layers' query heads (`out_proj`); convolution layers untouched"))
