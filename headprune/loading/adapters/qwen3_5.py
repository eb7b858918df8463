"""Qwen3.5 (``qwen3_5_text``, ``qwen3_5_moe_text``) and Qwen3.5 as shipped (``Qwen3_5ForConditionalGeneration``,
``Qwen3_5MoeForConditionalGeneration``: model types ``qwen3_5``, ``qwen3_5_moe``): hybrids of gated attention and
Gated DeltaNet layers (``config.layer_types``: ``full_attention`` one layer in four, ``linear_attention`` the rest).

An attention layer's heads are its query heads (``self_attn.{q,k,v,o}_proj``, grouped key/value heads): each query
head's ``q_proj`` rows are its query and then its gate, ``2 * head_dim`` rows a head, which the attention splits per
head and multiplies into that head's output before ``o_proj`` (so silencing the head's slice there removes it). A
Gated DeltaNet layer's heads are its value heads (``linear_attn``: :class:`~headprune.surgery.remote_modeling.
GatedDeltaNet` says which rows each keeps): ``L0.H1`` in a Gated DeltaNet layer is its value head 1, whose recurrent
state, gate and output are its own (its norm normalises each head alone); value heads read their key head in even
groups, so a sliced layer keeps even groups (a key head goes with its last value head). Per-head q/k norms, the
rotary sections and the MoE's router, experts and shared expert act within a head or beside the heads: untouched.
The vision tower (``model.visual``) is never touched.

GGUF (``qwen35``, ``qwen35moe``; the converter's ``Qwen3_5TextModel``, ``Qwen3_5MoeTextModel``): dense only, as
llama.cpp sizes every attention layer by one head count and every Gated DeltaNet by its ``ssm`` keys. The converter's
tensors: value heads reordered from grouped to tiled (``_LinearAttentionVReorderBase``: value head ``j`` of group
``g`` stored at ``j * key heads + g``), ``A_log`` as ``-exp(A_log)``, ``dt_bias`` as the ``ssm_dt`` bias, the
depthwise kernel as (channels, kernel), and the (1 + w) norms written plus one (the Gated DeltaNet's own is w).

ONNX: ``qwen3_5_text`` is a decoder for ONNX Runtime GenAI's ``qwen3_5_text`` type, each Gated DeltaNet's convolution
and recurrent states inputs and outputs of their own, its recurrence traced as one scan over the tokens
(:mod:`headprune.loading.delta_scan`); the others' ONNX is refused (``SCAN``).
"""

from __future__ import annotations

from typing import Any

import torch

from headprune.heads import ATTENTION
from headprune.loading.adapters.base import LLAMA_STYLE, VISION_LANGUAGE, Adapter, Mixer
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, GgufTensors, expert_keys, one_count
from headprune.loading.adapters.llama import GQA
from headprune.loading.delta_scan import scanned_delta_rule

LINEAR_ATTENTION = "linear_attention"  # a Gated DeltaNet layer, as transformers' layer_types name it
GATED_DELTANET = Mixer(
    LINEAR_ATTENTION, attention_path="linear_attn", output_projection_path="linear_attn.out_proj",
    qkv_layout="gated-deltanet", qkv_paths=("linear_attn.in_proj_qkv", "linear_attn.conv1d", "linear_attn.in_proj_z",
                                            "linear_attn.in_proj_b", "linear_attn.in_proj_a"),
    head_params=(("linear_attn.dt_bias", "q"), ("linear_attn.A_log", "q")),
    heads_attr="linear_num_value_heads", kv_heads_attr="linear_num_key_heads", head_dim_attr="linear_key_head_dim",
    out_dim_attr="linear_value_head_dim", kv_map=False)  # its code repeats key heads by one ratio


def layer_kinds(config: Any) -> list[str]:
    """Each layer's kind: ``linear_attention`` (a Gated DeltaNet) or attention."""
    return [LINEAR_ATTENTION if kind == LINEAR_ATTENTION else ATTENTION for kind in config.layer_types]


HYBRID = dict(mixers=(GATED_DELTANET,), layer_kinds=layer_kinds)
QWEN3_5 = Adapter(family="qwen3_5", **LLAMA_STYLE, **HYBRID)  # type: ignore[arg-type]
QWEN3_5_VL = Adapter(family="qwen3_5_vl", **VISION_LANGUAGE, **HYBRID)  # type: ignore[arg-type]

def _tiled(data: Any, dim: int, outer: int, inner: int, size: int) -> Any:
    """``data`` with its ``outer x inner`` blocks of ``size`` along ``dim`` transposed to ``inner x outer``."""
    shape = list(data.shape)
    return data.reshape(*shape[:dim], outer, inner, size, *shape[dim + 1:]).transpose(dim, dim + 1).reshape(shape)


class GatedDeltaNetTensors(GgufTensors):
    """Qwen3.5's tensors as llama.cpp's qwen35 graphs read them (the converter's ``modify_tensors``), and back."""

    TILED = True  # value heads reordered to tiled (qwen35's graphs); Qwen3-Next's graph reads them grouped

    # (name ends with, axis, rows a value head: "v" value width, 1 one) of the tensors with value-head rows
    VALUE_ROWS = ((".in_proj_qkv.weight", 0, "v"), (".conv1d.weight", 0, "v"), (".in_proj_z.weight", 0, "v"),
                  (".in_proj_a.weight", 0, 1), (".in_proj_b.weight", 0, 1), (".dt_bias", 0, 1), (".A_log", 0, 1),
                  (".out_proj.weight", 1, "v"))

    def _reorder(self, name: str, data: Any, config: Any, *, back: bool) -> Any:
        """Value heads grouped by key head (transformers) <-> tiled (llama.cpp's broadcast); ``back``: the inverse."""
        keys, values = config.linear_num_key_heads, config.linear_num_value_heads
        found = next(((dim, size) for end, dim, size in self.VALUE_ROWS if name.endswith(end)), None)
        if found is None or keys == values or not self.TILED:
            return data
        dim, size = found[0], config.linear_value_head_dim if found[1] == "v" else 1
        skip = 2 * keys * config.linear_key_head_dim if name.endswith(("in_proj_qkv.weight", "conv1d.weight")) else 0
        head, value = data.narrow(dim, 0, skip), data.narrow(dim, skip, data.shape[dim] - skip)
        outer, inner = (values // keys, keys) if back else (keys, values // keys)
        return torch.cat([head, _tiled(value, dim, outer, inner, size)], dim=dim)

    def to_llama_cpp(self, name: str, data: Any, config: Any) -> tuple[str, Any]:
        if ".linear_attn." not in name:
            return name, data + 1 if name.endswith("norm.weight") else data  # (1 + w) norms, as the converter
        data = self._reorder(name, data, config, back=False)
        if name.endswith(".A_log"):
            return name, -data.exp()
        if name.endswith(".dt_bias"):
            return name.removesuffix(".dt_bias") + ".dt_proj.bias", data
        return name, data.squeeze(1) if name.endswith(".conv1d.weight") else data

    def from_llama_cpp(self, name: str, data: Any, config: Any) -> Any:
        if ".linear_attn." not in name:
            return data - 1 if name.endswith("norm.weight") else data
        return self._reorder(name, (-data).log() if name.endswith(".A_log") else data, config, back=True)


def gated_deltanet_keys(writer: Any, config: Any) -> None:
    """The converter's keys (``Qwen3NextModel``): the Gated DeltaNets' sizes and which layers they are."""
    writer.add_ssm_conv_kernel(int(config.linear_conv_kernel_dim))
    writer.add_ssm_state_size(int(config.linear_key_head_dim))
    writer.add_ssm_group_count(int(config.linear_num_key_heads))
    writer.add_ssm_time_step_rank(int(config.linear_num_value_heads))
    writer.add_ssm_inner_size(int(config.linear_value_head_dim * config.linear_num_value_heads))
    writer.add_array(f"{writer.arch}.attention.recurrent_layers", [kind == LINEAR_ATTENTION
                                                                    for kind in config.layer_types])


def shared_expert_keys(writer: Any, config: Any) -> None:
    """The experts' keys and the shared expert's width (the converter's ``Qwen2MoeModel``)."""
    expert_keys(writer, config)
    writer.add_expert_shared_feed_forward_length(int(config.shared_expert_intermediate_size))


def _keys(writer: Any, config: Any) -> None:
    """The Gated DeltaNets' keys and M-RoPE's sections (the converter's ``_Qwen35MRopeMixin``)."""
    gated_deltanet_keys(writer, config)
    sections = list((config.rope_parameters or {}).get("mrope_section") or [11, 11, 10])
    writer.add_rope_dimension_sections((sections + [0] * 4)[:4])


def _moe_keys(writer: Any, config: Any) -> None:
    _keys(writer, config)
    shared_expert_keys(writer, config)


def unequal_heads(config: Any, arch: str) -> str | None:
    """Why llama.cpp's ``arch`` graph cannot take the Gated DeltaNets, which it sizes by one head size, or None."""
    if config.linear_key_head_dim != config.linear_value_head_dim:
        return ("its Gated DeltaNet key and value heads differ in size (linear_key_head_dim, linear_value_head_dim), "
                f"which llama.cpp's {arch} graph sizes alike")
    return None


def _refuse(config: Any) -> str | None:
    """What llama.cpp's qwen35 graphs fix that a config can set otherwise."""
    interleaved = (config.rope_parameters or {}).get("mrope_interleaved", True)
    return unequal_heads(config, "qwen35") or (
        None if interleaved else "its M-RoPE is not interleaved, as llama.cpp's qwen35 graph computes it")


# The tiny models: a Gated DeltaNet layer (4 value heads of 16 over 2 key heads of 8) then an attention layer (4 query
# heads of 16 over 2 key/value heads); M-RoPE's sections over the 2 rotary frequencies of a quarter of a head.
TEXT = dict(GQA, head_dim=16, layer_types=[LINEAR_ATTENTION, "full_attention"], linear_num_key_heads=2,
            linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=16,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25,
                                 mrope_section=[1, 1, 0], mrope_interleaved=True))
MOE = dict(TEXT, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32)
VISION = dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=64, out_hidden_size=64, patch_size=14,
              spatial_merge_size=2, temporal_patch_size=2, num_position_embeddings=16)
IMAGE_IDS = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
_NOTE = "gated attention's query heads and Gated DeltaNet value heads (even groups)"


def _modeling() -> Any:
    from transformers.models.qwen3_5 import modeling_qwen3_5

    return modeling_qwen3_5


# (docs/models.md: measured, a graph traced on 5 tokens refuses 39; qwen3_5_text's decoder scans: delta_scan)
SCAN = ("its linear_attention layers carry a recurrent state, whose scan over the tokens torch's ONNX exporter unrolls "
        "for the length it traced (the graph would take that one length)")
_EXPERTS = "; routers and experts untouched"
# The GGUF tests' variant: key and value heads of a Gated DeltaNet alike in size, as llama.cpp's graph sizes them, and
# two attention layers after it (one losing heads, one not: a sliced file's per-layer counts, which the graph refuses)
GGUF_VARIANT = {"linear_key_head_dim": 16, "num_hidden_layers": 3,
                "layer_types": [LINEAR_ATTENTION, *["full_attention"] * 2]}
_GGUF = dict(tensors=GatedDeltaNetTensors(), refuse=_refuse, variant=GGUF_VARIANT)
register(
    Family("qwen3_5_text", QWEN3_5, TinyModel("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", TEXT), note=_NOTE,
           genai="qwen3_5_text", traceable=scanned_delta_rule(_modeling),
           gguf=Gguf("qwen35", dense_only=one_count("qwen35") + " and every Gated DeltaNet by one value head count",
                     keys=_keys, holds=("blk.0.ssm_a", "qwen35.ssm.conv_kernel"), **_GGUF)),
    Family("qwen3_5_moe_text", QWEN3_5, TinyModel("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", MOE),
           note=_NOTE + _EXPERTS, onnx_refused=SCAN, gguf=Gguf(
               "qwen35moe", dense_only=one_count("qwen35moe") + " and every Gated DeltaNet by one value head count",
               keys=_moe_keys, ffn_length=lambda config: 0, holds=("blk.0.ffn_gate_inp_shexp.weight",
                                                                      "qwen35moe.expert_shared_feed_forward_length"),
               **_GGUF)),
    Family("qwen3_5", QWEN3_5_VL, TinyModel("Qwen3_5Config", "Qwen3_5ForConditionalGeneration", dict(
        text_config=TEXT, vision_config=VISION, image_ids=IMAGE_IDS)), note=_NOTE + "; the vision tower kept",
        onnx_refused=SCAN),
    Family("qwen3_5_moe", QWEN3_5_VL, TinyModel("Qwen3_5MoeConfig", "Qwen3_5MoeForConditionalGeneration", dict(
        text_config=MOE, vision_config=VISION, image_ids=IMAGE_IDS)),
        note=_NOTE + _EXPERTS + "; the vision tower kept", onnx_refused=SCAN),
)
