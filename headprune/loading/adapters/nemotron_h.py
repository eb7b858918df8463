"""Nemotron-H (``nemotron_h``: Nemotron-H 4B-56B, Nemotron Nano 2, and with experts Nemotron 3 Nano): a stack of
layers each of one kind (``config.layers_block_type``: ``linear_attention`` a Mamba2 mixer, ``full_attention``,
``mlp``, ``moe``), each one module at ``mixer`` behind one norm.

An attention layer's heads are its query heads (``mixer.{q,k,v,o}_proj``, grouped key/value heads, no RoPE). Mamba2,
MLP and mixture-of-experts layers have no heads headprune removes and are never touched (a Mamba2 layer's gated RMS
norm spans each group of its heads: ``granitemoehybrid`` says why its heads are not removed).

GGUF (the converter's ``NemotronHModel``): ``nemotron_h``, or ``nemotron_h_moe`` where the layers have experts.
llama.cpp's graph sizes each attention layer by its own head counts and tells a layer by its counts (a Mamba2 layer
has 0 key/value heads and no feed-forward width, an MLP or experts' layer a width), so a sliced file is written in
this architecture. The converter reads the checkpoint's own names (``backbone.layers.N.mixer.*``), which transformers
loads as ``model.layers``: they are written as it reads them.
"""

from __future__ import annotations

from typing import Any

from headprune.heads import ATTENTION
from headprune.loading.adapters.base import Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf
from headprune.loading.adapters.granitemoehybrid import MAMBA, MAMBA_TYPES, Mamba2, Mamba2Tensors
from headprune.loading.adapters.llama import GQA

NEMOTRON_MAMBA = Mamba2("mixer", "conv_kernel", "ssm_state_size", "n_groups", "mamba_num_heads", "mamba_head_dim")
WIDTHS = {"mlp": "intermediate_size", "moe": "moe_intermediate_size"}  # a feed-forward layer's width, by its kind


def layer_kinds(config: Any) -> list[str]:
    """Each layer's kind: attention, ``mamba`` (a Mamba2 mixer), ``mlp`` or ``moe`` (the last three without heads)."""
    return [MAMBA if kind in MAMBA_TYPES else ATTENTION if kind in ("attention", "full_attention") else kind
            for kind in config.layers_block_type]


class NemotronHTensors(Mamba2Tensors):
    """Nemotron-H's tensors under the checkpoint's names the converter maps (``backbone.layers.N.mixer.*``): the
    Mamba2 layers' as the converter writes them, ``dt_bias`` as ``dt.bias``, and the experts stacked as
    ``mlp.experts``."""

    def to_llama_cpp(self, name: str, data: Any, config: Any) -> tuple[str, Any]:
        name, data = super().to_llama_cpp(name, data, config)
        if ".mixer.experts." in name:  # (experts, out, in): llama.cpp's stacked tensors as they are
            return name.replace(".mixer.experts.", ".mlp.experts.") + ".weight", data
        return name.replace("model.layers.", "backbone.layers.", 1) if ".mixer." in name else name, data


def _arch(config: Any) -> str:
    return "nemotron_h_moe" if "moe" in config.layers_block_type else "nemotron_h"


def _widths(config: Any) -> list[int]:
    """Each layer's feed-forward width (0 in an attention or Mamba2 layer): how llama.cpp's graph tells them."""
    return [int(getattr(config, WIDTHS[kind])) if kind in WIDTHS else 0 for kind in layer_kinds(config)]


def _keys(writer: Any, config: Any) -> None:
    """The converter's keys (``NemotronHModel.set_gguf_parameters``): the Mamba2 sizes, both norms' epsilon (llama.cpp
    reads the plain one and the RMS one), and the experts'."""
    NEMOTRON_MAMBA.keys(writer, config)
    writer.add_layer_norm_eps(float(config.layer_norm_epsilon))
    writer.add_layer_norm_rms_eps(float(config.layer_norm_epsilon))
    if _arch(config) == "nemotron_h_moe":
        writer.add_expert_count(int(config.n_routed_experts))
        writer.add_expert_used_count(int(config.num_experts_per_tok))
        writer.add_expert_feed_forward_length(int(config.moe_intermediate_size))
        writer.add_expert_shared_feed_forward_length(int(config.moe_shared_expert_intermediate_size))
        writer.add_expert_shared_count(int(config.n_shared_experts))
        writer.add_expert_weights_norm(bool(config.norm_topk_prob))
        writer.add_expert_weights_scale(float(config.routed_scaling_factor))


def _refuse(config: Any) -> str | None:
    """What llama.cpp's nemotron_h graphs fix that a config can set otherwise."""
    kinds = set(config.layers_block_type)
    if {"mlp", "moe"} <= kinds:
        return "it has both MLP and experts' layers, and llama.cpp's nemotron_h_moe graph gives each such layer experts"
    if config.mlp_hidden_act != "relu2":
        return f"its MLP's activation ({config.mlp_hidden_act}) is not relu2, which llama.cpp's graph computes"
    if "moe" in kinds and (config.n_group != 1 or config.moe_latent_size is not None):
        return "its router groups experts (n_group) or projects them to a latent size, which headprune does not write"
    return NEMOTRON_MAMBA.refuse(config, "mamba_hidden_act", "use_bias")


# The tiny model: a Mamba2 layer (4 heads of 32 in 2 groups, chunks of 8 tokens), an attention layer (4 query heads of
# 16 over 2 key/value heads), an MLP layer, and another attention layer.
TINY = dict(GQA, layers_block_type=["linear_attention", "full_attention", "mlp", "full_attention"], head_dim=16,
            mamba_num_heads=4, mamba_head_dim=32, n_groups=2, ssm_state_size=8, chunk_size=8)
register(Family(
    "nemotron_h", Adapter(family="nemotron_h", layers_path="layers", attention_path="mixer",
                          output_projection_path="mixer.o_proj", kv_heads_attr="num_key_value_heads",
                          qkv_paths=("mixer.q_proj", "mixer.k_proj", "mixer.v_proj"), layer_kinds=layer_kinds),
    TinyModel("NemotronHConfig", "NemotronHForCausalLM", TINY),
    Gguf("nemotron_h", per_layer=True, kv_marks_recurrent=True, arch_of=_arch, keys=_keys, refuse=_refuse,
         rotary=False, ffn_length=_widths, tensors=NemotronHTensors(NEMOTRON_MAMBA),
         holds=("blk.0.ssm_conv1d.weight", "nemotron_h.ssm.group_count"), refused=(
             {"layers_block_type": ["linear_attention", "full_attention", "mlp", "moe", "full_attention"]},
             "both MLP and experts' layers")),
    note="attention layers' query heads; Mamba2, MLP and experts' layers untouched; GGUF `nemotron_h_moe` with experts",
    onnx_tokens=lambda config: int(config.chunk_size) + 3))
