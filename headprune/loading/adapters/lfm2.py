"""LFM2 (``lfm2``, Liquid AI's LFM2): short-convolution layers (``conv``: a gated depthwise convolution over the last
few tokens) and grouped-query attention layers (``config.layer_types`` ``conv``/``full_attention``).

An attention layer's heads are its query heads (``self_attn.{q,k,v}_proj`` and ``self_attn.out_proj``; the q/k
layer norms act on each head alike, one gain of ``head_dim``, so a head is removed exactly). Convolution layers have
no heads and are never touched; their state makes the grid recurrent, so an LFM2 is decoded plainly.

GGUF (the converter's ``LFM2Model``): llama.cpp's ``lfm2`` graph sizes the query and output projections by the width
(``{n_embd, n_embd}``), so the file is dense; it tells a convolution layer by its 0 key/value heads, and takes the
convolution's kernel as (channels, kernel). ONNX is a decoder for ONNX Runtime GenAI's ``lfm2`` type, the convolution
layers' states an input and output of their own (:mod:`headprune.exporter.onnx.export`).
"""

from __future__ import annotations

from typing import Any

from headprune.heads import ATTENTION
from headprune.loading.adapters.base import LLAMA_STYLE, Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, GgufTensors, one_count
from headprune.loading.adapters.llama import GQA

CONV = "conv"  # a short-convolution layer: no heads headprune removes


def layer_kinds(config: Any) -> list[str]:
    """Each layer's kind: ``conv`` (without heads) or attention."""
    return [CONV if kind == CONV else ATTENTION for kind in config.layer_types]


class ShortConvTensors(GgufTensors):
    """The convolution's depthwise kernel as llama.cpp's graph reads it: (channels, kernel), its middle axis dropped
    (``LFM2Model.modify_tensors``; put back by the caller)."""

    def to_llama_cpp(self, name: str, data: Any, config: Any) -> tuple[str, Any]:
        return name, data.squeeze(1) if name.endswith(".conv.conv.weight") else data


def _keys(writer: Any, config: Any) -> None:
    """The converter's keys (``LFM2Model.set_gguf_parameters``): the convolution's length and the norms' epsilon."""
    writer.add_shortconv_l_cache(int(config.conv_L_cache))
    writer.add_layer_norm_rms_eps(float(config.norm_eps))


def _refuse(config: Any) -> str | None:
    """What llama.cpp's lfm2 graph has no place for."""
    if config.conv_bias:
        return "its convolution layers have biases (conv_bias), which llama.cpp's graph has no place for"
    return None


def _ffn(config: Any) -> int:
    """The MLP's width as transformers builds it (``Lfm2MLP``: narrowed and rounded where the config auto-adjusts it)
    and the converter writes it."""
    width = int(config.intermediate_size)
    if config.block_auto_adjust_ff_dim:
        width = int(2 * width / 3)
        if config.block_ffn_dim_multiplier is not None:
            multiple = int(config.block_multiple_of)
            width = multiple * ((int(config.block_ffn_dim_multiplier * width) + multiple - 1) // multiple)
    return width


# The tiny model: a convolution layer before two attention layers (4 query heads over 2 key/value heads).
TINY = dict(GQA, num_hidden_layers=3, layer_types=[CONV, "full_attention", "full_attention"],
            block_auto_adjust_ff_dim=False)
register(Family(
    "lfm2", Adapter(family="lfm2", **dict(LLAMA_STYLE, output_projection_path="self_attn.out_proj"),  # type: ignore
                    layer_kinds=layer_kinds),
    TinyModel("Lfm2Config", "Lfm2ForCausalLM", TINY),
    Gguf("lfm2", dense_only=one_count("lfm2"), kv_marks_recurrent=True, keys=_keys, refuse=_refuse,
         tensors=ShortConvTensors(), ffn_length=_ffn,
         holds=("blk.0.shortconv.conv.weight", "lfm2.shortconv.l_cache"),
         variant={"block_auto_adjust_ff_dim": True, "block_multiple_of": 32}, refused=({"conv_bias": True}, "biases")),
    genai="lfm2", note="attention layers' query heads (`out_proj`); convolution layers untouched"))
