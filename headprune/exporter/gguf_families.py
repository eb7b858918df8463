"""Which models headprune writes to GGUF, and as which of llama.cpp's architectures.

A family is written only where llama.cpp's own graph for it computes what transformers does; anything else is refused
in one line naming the formats that do take it. The files themselves: :mod:`headprune.exporter.gguf_export`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from headprune.core.choices import GGUF_TYPES
from headprune.errors import ExportSettingsError, UnsupportedModelError
from headprune.exporter.gguf_quant import K_QUANTS


@dataclass(frozen=True)
class GgufFamily:
    """How one model type is written: llama.cpp's architecture for it (the converter's choice), whether its q/k rows
    are permuted to that graph's rotation, why a sliced file cannot be written (None: as ``deci``), and the keys of
    its own that the graph reads."""

    arch: str
    permuted: bool  # llama.cpp rotates adjacent pairs in this graph (LLAMA_ROPE_TYPE_NORM): LlamaModel.permute
    dense_only: str | None = None
    keys: Callable[[Any, Any], None] | None = None  # (gguf.GGUFWriter, config) -> None
    refuse: Callable[[Any], str | None] | None = None  # config -> what llama.cpp's graph would compute otherwise
    k_quants: bool = False  # llama.cpp's choice of K-quant tensor types is reproduced (gguf_quant) for its tensors


def _experts(writer: Any, config: Any) -> None:
    """Mixture-of-experts keys (the converter's ``set_gguf_parameters``): how many experts, how many each token
    uses, and an expert's own hidden size where the config names one apart from the dense MLP's."""
    writer.add_expert_count(int(getattr(config, "num_local_experts", None) or config.num_experts))
    writer.add_expert_used_count(int(config.num_experts_per_tok))
    if getattr(config, "moe_intermediate_size", None):
        writer.add_expert_feed_forward_length(int(config.moe_intermediate_size))


def _qwen3_moe(config: Any) -> str | None:
    """llama.cpp's qwen3moe graph renormalises the chosen experts' weights and puts experts in every layer."""
    if not getattr(config, "norm_topk_prob", False):
        return ("its router's top-k weights are not renormalised (norm_topk_prob false), which llama.cpp's qwen3moe "
                "graph always does")
    if getattr(config, "mlp_only_layers", None) or getattr(config, "decoder_sparse_step", 1) != 1:
        return "it has layers with a dense MLP (mlp_only_layers, decoder_sparse_step), which llama.cpp's qwen3moe lacks"
    return None


def _granite_scales(writer: Any, config: Any) -> None:
    """Granite's scalar multipliers, read by llama.cpp's granite graph (``GraniteModel.set_gguf_parameters``)."""
    writer.add_attention_scale(float(config.attention_multiplier))
    writer.add_embedding_scale(float(config.embedding_multiplier))
    writer.add_residual_scale(float(config.residual_multiplier))
    writer.add_logit_scale(float(config.logits_scaling))


# Why each family is dense only: llama.cpp sizes every layer by layer 0's head counts except in its deci graph
# (test_gguf's test_plain_llama_architecture_cannot_take_per_layer_head_counts), and deci is a plain Llama layer.
_ONE_COUNT = "llama.cpp's {arch} graph takes one head count for every layer"
_NO_DECI = " and its graph for per-layer head counts (deci) has no {what}, which {name} needs"
FAMILIES: dict[str, GgufFamily] = {
    "llama": GgufFamily("llama", True, k_quants=True),
    "mistral": GgufFamily("llama", True, k_quants=True),
    "qwen2": GgufFamily("qwen2", False, k_quants=True),
    "qwen3": GgufFamily("qwen3", False, "llama.cpp's graph for per-layer head counts (deci) has no q/k norms, which "
                        "Qwen3 needs", k_quants=True),
    "qwen3_moe": GgufFamily("qwen3moe", False, _ONE_COUNT.format(arch="qwen3moe") + _NO_DECI.format(
        what="q/k norms or experts", name="Qwen3-MoE"), _experts, _qwen3_moe),
    "mixtral": GgufFamily("llama", True, _ONE_COUNT.format(arch="llama") + _NO_DECI.format(
        what="experts", name="Mixtral"), _experts),
    "phi3": GgufFamily("phi3", False, _ONE_COUNT.format(arch="phi3") + " (its fused attn_qkv is sized by it)"),
    "granite": GgufFamily("granite", True, _ONE_COUNT.format(arch="granite") + _NO_DECI.format(
        what="scalar multipliers", name="Granite"), _granite_scales),
}
MODEL_TYPES = tuple(FAMILIES)
# Families headprune writes as GGUF only in the dense layout, and why (the refusal of a sliced one says it).
DENSE_ONLY = {t: f.dense_only for t, f in FAMILIES.items() if f.dense_only}
OTHER_FORMATS = "safetensors, onnx"
# RoPE scalings llama.cpp's graphs compute as transformers does. "dynamic" (NTK) rescales only past the trained context
# in transformers, and llama.cpp never does: written as plain RoPE with a note. "llama3" needs llama.cpp's rope_freqs
# tensor, which only its llama and deci graphs read. "longrope" (Phi-3) and the others are not written.
ROPE_TYPES = ("default", "linear", "llama3", "yarn", "dynamic")
ROPE_FREQS_ARCHES = ("llama", "deci")
# The graphs whose q/k rows are permuted to adjacent pairs beside the families' own (the sliced layout's).
PERMUTED_ARCHES = ("deci", *sorted({f.arch for f in FAMILIES.values() if f.permuted}))


def family_of(config: Any) -> GgufFamily:
    return FAMILIES[getattr(config, "model_type", "")]


def check_type(gguf_type: str) -> None:
    """Refuse a GGUF tensor type headprune does not write.

    Raises:
        ExportSettingsError
    """
    if gguf_type not in GGUF_TYPES:
        raise ExportSettingsError(f"gguf_type must be one of {', '.join(GGUF_TYPES)}, not {gguf_type!r}",
                                  settings=("gguf_type",))


def check_supported(lm: Any, layout: str, gguf_type: str) -> str:
    """The GGUF architecture for ``lm`` in ``layout``.

    Raises:
        UnsupportedModelError: a family or configuration llama.cpp's llama/qwen2/deci graphs do not compute.
        ExportSettingsError: an unknown GGUF type.
    """
    check_type(gguf_type)
    config = lm.model.config
    model_type = getattr(config, "model_type", "")
    if lm.is_encoder or model_type not in MODEL_TYPES or lm.task_head != "causal-lm":
        raise UnsupportedModelError(
            f"{lm.name} ({model_type or lm.adapter.family}"
            f"{'' if lm.task_head == 'causal-lm' else ', ' + lm.task_head + ' head'}) cannot be exported as GGUF: GGUF export "
            f"supports these causal language models ({', '.join(MODEL_TYPES)}); this model can be exported "
            f"as {OTHER_FORMATS}")
    if getattr(config, "use_sliding_window", False):
        raise UnsupportedModelError(f"{lm.name}: sliding-window attention is not written to GGUF by headprune; "
                                    f"this model can be exported as {OTHER_FORMATS}")
    if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "mlp_bias", False):
        raise UnsupportedModelError(f"{lm.name}: GGUF export needs a SiLU gated MLP without biases; this model can "
                                    f"be exported as {OTHER_FORMATS}")
    if gguf_type in K_QUANTS and not FAMILIES[model_type].k_quants:
        raise UnsupportedModelError(f"{lm.name}: --gguf-type {gguf_type} is not written for {model_type}: llama.cpp's "
                                    "quantizer picks its tensors' types (fused attention, experts) by rules headprune "
                                    "does not reproduce; give f32, f16, bf16 or q8_0 (llama-quantize makes K-quants "
                                    "of the f32 file)")
    odd = FAMILIES[model_type].refuse(config) if FAMILIES[model_type].refuse else None
    if odd:
        raise UnsupportedModelError(f"{lm.name}: GGUF export of this {model_type} model is not written: {odd}; this "
                                    f"model can be exported as {OTHER_FORMATS}")
    rope = rope_parameters(config)
    kind = rope.get("rope_type", "default")
    if kind not in ROPE_TYPES:
        raise UnsupportedModelError(f"{lm.name}: RoPE type {kind!r} is not written to GGUF by headprune (llama.cpp "
                                    f"applies it only in other architectures' graphs; RoPE types written: "
                                    f"{', '.join(ROPE_TYPES)}); this model can be exported as {OTHER_FORMATS}")
    if layout == "sliced" and model_type in DENSE_ONLY:
        raise UnsupportedModelError(f"{lm.name}: a sliced GGUF cannot be written: {DENSE_ONLY[model_type]}; give "
                                    f"--layout dense (every head kept in shape, removed ones zeroed), or export "
                                    f"sliced as {OTHER_FORMATS}")
    # llama.cpp's qwen2 graph has no rope_freqs tensor: Llama 3.1-style scaling goes in its llama graph, which takes
    # Qwen2's q/k/v biases too.
    arch = "deci" if layout == "sliced" else "llama" if model_type == "qwen2" and kind == "llama3" else \
        FAMILIES[model_type].arch
    if kind == "llama3" and arch not in ROPE_FREQS_ARCHES:
        raise UnsupportedModelError(f"{lm.name}: Llama 3.1-style RoPE (llama3) is not written to GGUF for "
                                    f"{model_type}: llama.cpp's {arch} graph does not read its rope_freqs; this model "
                                    f"can be exported as {OTHER_FORMATS}")
    return arch


def rope_parameters(config: Any) -> dict:
    """The config's RoPE parameters (a full-attention layer's, where layer types have their own), with its theta."""
    params = getattr(config, "rope_parameters", None) or {}
    params = dict(params.get("full_attention", params))
    params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    params.setdefault("partial_rotary_factor", getattr(config, "partial_rotary_factor", None) or 1.0)  # transformers 4
    return params

