"""Which models headprune writes to GGUF, and as which of llama.cpp's architectures.

A family is written only where llama.cpp's own graph for it computes what transformers does; anything else is refused
in one line naming the formats that do take it. The files themselves: :mod:`headprune.exporter.gguf_export`.
"""

from __future__ import annotations

from typing import Any

from headprune.core.choices import GGUF_TYPES
from headprune.errors import ExportSettingsError, UnsupportedModelError

MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")  # models llama.cpp runs as llama / qwen2 / qwen3 / deci
# Families whose per-head q/k norms llama.cpp's deci graph (per-layer head counts) lacks: dense only
DENSE_ONLY = {"qwen3": "llama.cpp's graph for per-layer head counts (deci) has no q/k norms, which Qwen3 needs"}
OTHER_FORMATS = "safetensors, onnx"
# RoPE scalings llama.cpp's llama/qwen2/deci graphs compute as transformers does. "dynamic" (NTK) rescales only past
# the trained context in transformers, and llama.cpp never does: written as plain RoPE with a note. "longrope" (Phi-3)
# and the others need llama.cpp graphs headprune does not write.
ROPE_TYPES = ("default", "linear", "llama3", "yarn", "dynamic")


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
            f"supports Llama-style causal language models ({', '.join(MODEL_TYPES)}); this model can be exported "
            f"as {OTHER_FORMATS}")
    if getattr(config, "use_sliding_window", False):
        raise UnsupportedModelError(f"{lm.name}: sliding-window attention is not written to GGUF by headprune; "
                                    f"this model can be exported as {OTHER_FORMATS}")
    if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "mlp_bias", False):
        raise UnsupportedModelError(f"{lm.name}: GGUF export needs a SiLU gated MLP without biases; this model can "
                                    f"be exported as {OTHER_FORMATS}")
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
    if layout == "sliced":
        return "deci"
    if model_type == "qwen3":
        return "qwen3"
    # llama.cpp's qwen2 graph has no rope_freqs tensor: Llama 3.1-style scaling goes in its llama graph, which takes
    # Qwen2's q/k/v biases too.
    return "qwen2" if model_type == "qwen2" and kind != "llama3" else "llama"


def rope_parameters(config: Any) -> dict:
    """The config's RoPE parameters (a full-attention layer's, where layer types have their own), with its theta."""
    params = getattr(config, "rope_parameters", None) or {}
    params = dict(params.get("full_attention", params))
    params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    return params

