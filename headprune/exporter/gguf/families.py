"""Which models headprune writes to GGUF, and as which of llama.cpp's architectures.

A family is written only where llama.cpp's own graph for it computes what transformers does; anything else is refused
in one line naming the formats that do take it. The files themselves: :mod:`headprune.exporter.gguf.writer`.
"""

from __future__ import annotations

from typing import Any

from headprune.core.choices import GGUF_TYPES
from headprune.errors import ExportSettingsError, UnsupportedModelError
from headprune.exporter.gguf.encoders import check_encoder
from headprune.exporter.gguf.quant import K_QUANTS
from headprune.loading.adapters import FAMILIES as FAMILIES_REGISTRY
from headprune.loading.adapters.gguf_spec import GELU_TABLE, Gguf
from headprune.surgery.remote_modeling import QkvLayout, qkv_layout


# llama.cpp's CPU GELU is a float16 table (gguf_spec.GELU_TABLE says what it moves): Gemma's, GPT-2's and BERT's files
# are gated at 1e-3 of the largest logit, not GGUF's 5e-5, and the record says why.
GELU_NOTE = ("llama.cpp's CPU GELU rounds through a float16 table, so its logits are checked against the masked "
             f"original's within {GELU_TABLE:g} of the largest logit (GGUF's usual 5e-05 elsewhere)")
ERF_GELU_NOTE = ("the checkpoint's MLP computes the exact (erf) GELU, llama.cpp's gptneox graph its tanh form (as for "
                 "every Pythia GGUF), which moves the logits slightly (within the gate here)")
# Every registered model type that declares a GGUF file, and how (its family file's Gguf), by model type.
FAMILIES: dict[str, Gguf] = {t: f.gguf for t, f in sorted(FAMILIES_REGISTRY.items()) if f.gguf is not None}
MODEL_TYPES = tuple(t for t, f in FAMILIES.items() if not f.encoder)
ENCODER_TYPES = tuple(t for t, f in FAMILIES.items() if f.encoder)
# Families headprune writes as GGUF only in the dense layout, and why (the refusal of a sliced one says it).
DENSE_ONLY = {t: f.dense_only for t, f in FAMILIES.items() if f.dense_only}
OTHER_FORMATS = "safetensors, onnx"
# RoPE scalings llama.cpp's graphs compute as transformers does. "dynamic" (NTK) rescales only past the trained context
# in transformers, and llama.cpp never does: written as plain RoPE with a note. "llama3" needs llama.cpp's rope_freqs
# tensor, which its llama and deci graphs read and those of the families that say so (Gguf.rope_freqs); "longrope"
# (Phi-3.5, Phi-4-mini) its rope_factors tensors, read by its phi3 graph; "proportional" (Gemma 4's full-attention
# layers) a rope_freqs tensor that stops the unrotated dimensions, read by its gemma4 graph. The others are not written.
ROPE_TYPES = ("default", "linear", "llama3", "yarn", "dynamic", "longrope", "proportional")
ROPE_FACTOR_ARCHES = {"llama3": ("llama", "deci", *sorted({f.arch for f in FAMILIES.values() if f.rope_freqs})),
                      "longrope": ("phi3",), "proportional": ("gemma4",)}
# The graphs whose q/k rows are permuted to adjacent pairs beside the families' own (the sliced layout's).
PERMUTED_ARCHES = ("deci", *sorted({f.arch for f in FAMILIES.values() if f.permuted}))


def family_of(config: Any) -> Gguf:
    """How ``config``'s model type is written to GGUF."""
    return FAMILIES[getattr(config, "model_type", "")]


def qkv_of(config: Any) -> QkvLayout:
    """How ``config``'s model type lays out its q/k/v projections (for llama.cpp's order of a fused one's rows)."""
    return qkv_layout(FAMILIES_REGISTRY[getattr(config, "model_type", "")].adapter.qkv_layout)


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
    if lm.adapter.text_config:  # a vision-language model as shipped: llama.cpp keeps the tower in an mmproj file
        text_type = getattr(getattr(config, lm.adapter.text_config), "model_type", "")
        alone = (f", and its language model saved alone ({text_type}, docs/models.md) as GGUF"
                 if text_type in MODEL_TYPES else "")
        raise UnsupportedModelError(
            f"{lm.name} ({model_type}, a vision-language model with its vision tower) cannot be exported as GGUF: "
            "llama.cpp runs a vision tower from a separate mmproj file, which headprune does not write (a text-only "
            f"GGUF would drop it); this model can be exported as {OTHER_FORMATS}{alone}")
    if model_type in ENCODER_TYPES:
        return check_encoder(lm, FAMILIES[model_type], layout, gguf_type, OTHER_FORMATS)
    known = FAMILIES_REGISTRY.get(model_type)
    if known is not None and known.gguf_refused:
        raise UnsupportedModelError(f"{lm.name} ({model_type}) cannot be exported as GGUF: {known.gguf_refused}; this "
                                    f"model can be exported as {OTHER_FORMATS}")
    if lm.is_encoder or model_type not in MODEL_TYPES or lm.task_head != "causal-lm":
        raise UnsupportedModelError(
            f"{lm.name} ({model_type or lm.adapter.family}"
            f"{'' if lm.task_head == 'causal-lm' else ', ' + lm.task_head + ' head'}) cannot be exported as GGUF: GGUF export "
            f"supports these causal language models ({', '.join(MODEL_TYPES)}) and the bare encoders of "
            f"{', '.join(ENCODER_TYPES)}; this model can be exported as {OTHER_FORMATS}")
    if getattr(config, "use_sliding_window", False):
        raise UnsupportedModelError(f"{lm.name}: sliding-window attention is not written to GGUF by headprune; "
                                    f"this model can be exported as {OTHER_FORMATS}")
    family = FAMILIES[model_type]
    activation = (getattr(config, "hidden_act", None) or getattr(config, "hidden_activation", None)
                  or getattr(config, "activation_function", None) or "silu")
    if activation not in family.activation or (family.gated and getattr(config, "mlp_bias", False)):
        kind = "gated MLP without biases" if family.gated else "MLP"
        raise UnsupportedModelError(f"{lm.name}: GGUF export of {model_type} needs a {' or '.join(family.activation)} "
                                    f"{kind}, as llama.cpp's graph computes it; this model can be exported as "
                                    f"{OTHER_FORMATS}")
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
    arch = ("deci" if not family.per_layer else family.arch_for(config)) if layout == "sliced" else \
        "llama" if model_type == "qwen2" and kind == "llama3" else family.arch_for(config)
    if arch not in ROPE_FACTOR_ARCHES.get(kind, (arch,)):
        raise UnsupportedModelError(f"{lm.name}: RoPE type {kind!r} is not written to GGUF for {model_type}: only "
                                    f"llama.cpp's {', '.join(ROPE_FACTOR_ARCHES[kind])} graphs read its factors "
                                    f"(RoPE types written: {', '.join(ROPE_TYPES)}); this model can be exported as "
                                    f"{OTHER_FORMATS}")
    return arch


def rope_parameters(config: Any) -> dict:
    """The config's RoPE parameters (a full-attention layer's, where layer types have their own), with its theta."""
    params = getattr(config, "rope_parameters", None) or {}
    params = dict(params.get("full_attention", params))
    params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    params.setdefault("partial_rotary_factor", getattr(config, "partial_rotary_factor", None) or 1.0)  # transformers 4
    return params

