"""Granite 4 (``granitemoehybrid``: Granite-4.0-H Micro, Tiny and Small, and the attention-only Granite-4.0 Micro):
Mamba2 layers and grouped-query attention layers (``config.layer_types``: ``mamba`` / ``attention``, which
transformers reads as ``linear_attention`` / ``full_attention``), each followed by a mixture of experts beside a
shared MLP (or the shared MLP alone).

An attention layer's heads are Llama's (``self_attn.{q,k,v,o}_proj``, grouped key/value heads; scaled by
``attention_multiplier``, without RoPE unless ``position_embedding_type`` says ``rope``: Granite 4 ships without). A
Mamba2 layer has no heads headprune removes and is never touched: its gated RMS norm divides each head's output by a
root mean square taken over its whole group of heads (Granite 4: one group, the whole layer), so a model without a
Mamba head's rows computes other outputs for the heads kept (docs/models.md: measured). Routers, experts and the
shared MLP are untouched.

GGUF (``granitehybrid``; the converter's ``GraniteHybridModel``): llama.cpp's graph sizes each attention layer by its
own head counts and tells a Mamba2 layer by its 0 key/value heads, so a sliced file is written in this architecture.
The Mamba2 tensors are written as the converter's ``Mamba2Model.modify_tensors`` writes them (:class:`Mamba2Tensors`),
and the experts' and the shared MLP's fused gate and up rows split. ONNX is a decoder for ONNX Runtime GenAI's
``granitemoehybrid`` type, each Mamba2 layer's states an input and output of their own
(:mod:`headprune.exporter.onnx.decoder_cache`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from headprune.heads import ATTENTION
from headprune.loading.adapters.base import LLAMA_STYLE, Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, GgufTensors, expert_keys
from headprune.loading.adapters.llama import GQA, granite_scales

MAMBA = "mamba"  # a Mamba2 layer: no heads headprune removes
MAMBA_TYPES = ("mamba", "linear_attention")  # as config.json and as transformers name it


@dataclass(frozen=True)
class Mamba2:
    """Where a family keeps its Mamba2 mixers (``path``, from a layer) and the config attributes that size them."""

    path: str
    conv: str
    state: str
    groups: str
    heads: str
    head_dim: str

    def size(self, config: Any, attr: str) -> int:
        return int(getattr(config, getattr(self, attr)))

    def keys(self, writer: Any, config: Any) -> None:
        """llama.cpp's ``ssm`` keys (the converter's ``Mamba2Model.set_gguf_parameters``): the convolution's kernel,
        the state's size, the groups, the heads (``time_step_rank``) and their width together (``inner_size``)."""
        writer.add_ssm_conv_kernel(self.size(config, "conv"))
        writer.add_ssm_state_size(self.size(config, "state"))
        writer.add_ssm_group_count(self.size(config, "groups"))
        writer.add_ssm_time_step_rank(self.size(config, "heads"))
        writer.add_ssm_inner_size(self.size(config, "heads") * self.size(config, "head_dim"))

    def refuse(self, config: Any, act: str, bias: str) -> str | None:
        """What llama.cpp's Mamba2 layer computes otherwise: its convolution's SiLU, no clamp of the time step, no
        bias on the input projection (``act``, ``bias``: the config's attributes of them)."""
        if getattr(config, act, "silu") != "silu":
            return f"its Mamba2 layers' activation ({act}) is not silu, which llama.cpp's graph computes"
        limit = tuple(getattr(config, "time_step_limit", None) or (0.0, float("inf")))
        if limit != (0.0, float("inf")):
            return f"its Mamba2 layers clamp their time step (time_step_limit {limit}), which llama.cpp's does not"
        if getattr(config, bias, False):
            return f"its Mamba2 layers' projections have biases ({bias}), which llama.cpp's graph has no place for"
        return None


class Mamba2Tensors(GgufTensors):
    """A family's Mamba2 tensors as llama.cpp's graph reads them (``Mamba2Model.modify_tensors``): ``-exp(A_log)``
    and ``D`` as (heads, 1), ``dt_bias`` as the ``ssm_dt`` bias, the depthwise kernel as (channels, kernel), the norm's
    gain as (groups, width of a group); and back."""

    def __init__(self, mamba: Mamba2) -> None:
        self.mamba = mamba

    def _mine(self, name: str) -> bool:
        return f".{self.mamba.path}." in name

    def to_llama_cpp(self, name: str, data: Any, config: Any) -> tuple[str, Any]:
        if not self._mine(name):
            return name, data
        if name.endswith(".A_log"):
            return name, -data.exp().reshape(-1, 1)
        if name.endswith(".D"):
            return name, data.reshape(-1, 1)
        if name.endswith(".dt_bias"):
            return name.removesuffix("dt_bias") + "dt_proj.bias", data
        if name.endswith(".conv1d.weight"):
            return name, data.squeeze(1)
        if name.endswith(".norm.weight"):
            return name, data.reshape(self.mamba.size(config, "groups"), -1)
        return name, data

    def from_llama_cpp(self, name: str, data: Any, config: Any) -> Any:
        return (-data).log() if self._mine(name) and name.endswith(".A_log") else data


def _block(name: str) -> str:
    return name.split(".layers.")[1].split(".")[0]


class GraniteHybridTensors(Mamba2Tensors):
    """Granite 4's tensors as the converter writes them: its Mamba2 layers', the router as ``ffn_gate_inp`` and the
    shared MLP's fused ``input_linear`` split into gate and up rows (``GraniteMoeModel.modify_tensors``: the shared
    expert's beside experts, the MLP's without)."""

    SHARED = ".shared_mlp.input_linear.weight"

    def to_llama_cpp(self, name: str, data: Any, config: Any) -> tuple[str, Any]:
        if name.endswith(".block_sparse_moe.router.weight"):
            return name.replace(".router.weight", ".router.layer.weight"), data
        if name.endswith(".shared_mlp.output_linear.weight") and not config.num_local_experts:
            return name.replace(".shared_mlp.output_linear.", ".mlp.down_proj."), data
        return super().to_llama_cpp(name, data, config)

    def _names(self, name: str, config: Any) -> tuple[str, str]:
        suffix = "_shexp" if config.num_local_experts else ""
        return tuple(f"blk.{_block(name)}.ffn_{kind}{suffix}.weight" for kind in ("gate", "up"))  # type: ignore

    def split(self, name: str, data: Any, config: Any) -> dict[str, Any] | None:
        """The shared MLP's fused gate and up rows as two tensors (``Gguf.split``); None for any other tensor."""
        if not name.endswith(self.SHARED):
            return None
        gate, up = data.chunk(2, dim=0)
        return dict(zip(self._names(name, config), (gate.contiguous(), up.contiguous())))

    def join(self, name: str, stored: Any, config: Any) -> Any | None:
        """The shared MLP's fused rows back from a lossy file's two (``Gguf.join``); None for any other tensor."""
        names = self._names(name, config) if name.endswith(self.SHARED) else ()
        if not names or not all(n in stored for n in names):
            return None
        return torch.cat([torch.as_tensor(stored[n]) for n in names])


GRANITE_MAMBA = Mamba2("mamba", "mamba_d_conv", "mamba_d_state", "mamba_n_groups", "mamba_n_heads", "mamba_d_head")
GRANITE_TENSORS = GraniteHybridTensors(GRANITE_MAMBA)


def layer_kinds(config: Any) -> list[str]:
    """Each layer's kind: ``mamba`` (a Mamba2 layer, without heads) or attention."""
    return [MAMBA if kind in MAMBA_TYPES else ATTENTION for kind in config.layer_types]


def _keys(writer: Any, config: Any) -> None:
    """The converter's keys (``GraniteHybridModel.set_gguf_parameters``): Granite's multipliers, the Mamba2 sizes,
    the experts and the shared MLP's width, and whether the attention layers rotate (``rope.scaling.finetuned``,
    which llama.cpp's granitehybrid graph reads as that switch)."""
    granite_scales(writer, config)
    GRANITE_MAMBA.keys(writer, config)
    if config.num_local_experts:
        expert_keys(writer, config)
        writer.add_expert_shared_feed_forward_length(int(config.shared_intermediate_size))
    writer.add_rope_scaling_finetuned(config.position_embedding_type == "rope")


def _refuse(config: Any) -> str | None:
    """What llama.cpp's granitehybrid graph fixes that a config can set otherwise."""
    if any(kind in MAMBA_TYPES for kind in config.layer_types) and config.mamba_expand != 2:
        return f"its Mamba2 layers expand the width by {config.mamba_expand}, and llama.cpp's graph by 2 only"
    return GRANITE_MAMBA.refuse(config, "hidden_act", "mamba_proj_bias")


# The tiny model: a Mamba2 layer (4 heads of 32, one group, chunks of 8 tokens, so that the suite's prompts span
# several) before two attention layers (4 query heads over 2 key/value heads), a mixture of 4 experts beside a shared
# MLP after each; Granite's multipliers.
TINY = dict(GQA, num_hidden_layers=3, layer_types=[MAMBA, "attention", "attention"], mamba_n_heads=4, mamba_d_head=32,
            mamba_d_state=8, mamba_chunk_size=8, num_local_experts=4, num_experts_per_tok=2,
            shared_intermediate_size=32,
            attention_multiplier=0.3, embedding_multiplier=2.0, residual_multiplier=0.5, logits_scaling=2.0)
register(Family(
    "granitemoehybrid", Adapter(family="granitemoehybrid", **LLAMA_STYLE, layer_kinds=layer_kinds),  # type: ignore
    TinyModel("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM", TINY),
    Gguf("granitehybrid", permuted=True, per_layer=True, kv_marks_recurrent=True, keys=_keys, refuse=_refuse,
         tensors=GRANITE_TENSORS, split=GRANITE_TENSORS.split, join=GRANITE_TENSORS.join,
         ffn_length=lambda c: int(c.intermediate_size if c.num_local_experts else c.shared_intermediate_size),
         holds=("blk.0.ssm_a", "granitehybrid.ssm.inner_size"), variant={"position_embedding_type": "rope"},
         refused=({"time_step_limit": (0.0, 100.0)}, "clamp their time step")),
    note="attention layers' query heads; Mamba2 layers untouched; routers and experts untouched",
    genai="granitemoehybrid", onnx_tokens=lambda config: int(config.mamba_chunk_size) + 3))
