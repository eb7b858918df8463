"""Which models headprune writes to GGUF, and as which of llama.cpp's architectures.

A family is written only where llama.cpp's own graph for it computes what transformers does; anything else is refused
in one line naming the formats that do take it. The files themselves: :mod:`headprune.exporter.gguf.writer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from headprune.core.choices import GGUF_TYPES
from headprune.errors import ExportSettingsError, UnsupportedModelError
from headprune.exporter.gguf.encoders import ENCODERS, GELU_TABLE, check_encoder
from headprune.exporter.gguf.quant import K_QUANTS


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
    k_quants: bool = False  # llama.cpp's choice of K-quant tensor types is reproduced (quant) for its tensors
    activation: tuple[str, ...] = ("silu",)  # the MLP's, as the config names it (those llama.cpp's graph computes)
    norm_offset: float = 0.0  # added to every norm gain: Gemma's RMSNorm scales by (1 + w), llama.cpp's by w
    tolerance: float | None = None  # the runtime gate's, where llama.cpp's kernels round (GELU_TABLE below)
    interleaved_experts: bool = False  # GPT-OSS: experts as x @ W, gate and up columns alternating (experts)
    sliding_window: bool = False  # the config's sliding window is written, and llama.cpp's graph applies it
    gated: bool = True  # a gated MLP without biases; else up and down projections with biases (GPT-2, NeoX)
    rotary: bool = True  # RoPE keys are written (GPT-2 has learned positions: position_embd)
    qkv_layout: str | None = None  # "gpt2", "neox": fused tensors llama.cpp takes in another layout (fused)
    ffn_length: Callable[[Any], int] | None = None  # config -> the MLP's width, where not intermediate_size
    own_output: bool = False  # the graph reads output.weight even where the embeddings are tied: written then
    encoder: bool = False  # a bare encoder: llama.cpp's graph gives its last hidden states (embeddings), not logits
    position_offset: Callable[[Any], int] | None = None  # config -> position rows the file leaves out (RoBERTa's)
    dropped: tuple[str, ...] = ()  # tensors (prefixes) llama.cpp's graph does not read, left out as the converter does


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


def _layer_norm(writer: Any, config: Any) -> None:
    """The epsilon of a LayerNorm family (OLMo's norms have no gain and a fixed 1e-5; Cohere and GPT-2 name their
    own)."""
    eps = getattr(config, "layer_norm_eps", None) or getattr(config, "layer_norm_epsilon", None)
    writer.add_layer_norm_eps(float(eps or 1e-5))


def _neox(writer: Any, config: Any) -> None:
    """GPT-NeoX (the converter's ``GPTNeoXModel``): attention and MLP in parallel or one after the other."""
    _layer_norm(writer, config)
    writer.add_parallel_residual(bool(getattr(config, "use_parallel_residual", True)))


def _gpt2_attention(config: Any) -> str | None:
    """llama.cpp's gpt2 graph scales every layer's scores by 1/sqrt(head size)."""
    if getattr(config, "scale_attn_by_inverse_layer_idx", False) or not getattr(config, "scale_attn_weights", True):
        return ("its attention scores are scaled otherwise than by 1/sqrt(head size) (scale_attn_weights, "
                "scale_attn_by_inverse_layer_idx), which llama.cpp's gpt2 graph fixes")
    return None


def _neox_biases(config: Any) -> str | None:
    if not getattr(config, "attention_bias", True):
        return "its attention has no biases (attention_bias false), which llama.cpp's gptneox graph reads"
    return None


def _olmo(writer: Any, config: Any) -> None:
    _layer_norm(writer, config)
    if getattr(config, "clip_qkv", None):
        writer.add_clamp_kqv(float(config.clip_qkv))


def _cohere(writer: Any, config: Any) -> None:
    _layer_norm(writer, config)
    writer.add_logit_scale(float(config.logit_scale))


def _olmoe(config: Any) -> str | None:
    if config.num_key_value_heads != config.num_attention_heads:
        return "it groups key/value heads, and llama.cpp's olmoe graph sizes the k norm by all query heads"
    return None


def _cohere_norms(config: Any) -> str | None:
    if getattr(config, "use_qk_norm", False) and config.num_hidden_layers < 64:
        return ("llama.cpp's command-r graph reads per-head q/k norms only in a model of 64 layers or more (Command "
                f"R+), and this one has {config.num_hidden_layers}")
    return None


def _gpt_oss(writer: Any, config: Any) -> None:
    """GPT-OSS (the converter's ``GptOssModel``): experts of the config's intermediate size, the sliding window."""
    _experts(writer, config)
    writer.add_expert_feed_forward_length(int(config.intermediate_size))
    writer.add_sliding_window(int(config.sliding_window))


def _gpt_oss_layers(config: Any) -> str | None:
    """llama.cpp's gpt-oss graph fixes the SwiGLU clamp (7) and the layers' pattern (sliding first, alternating)."""
    if float(getattr(config, "swiglu_limit", 7.0)) != 7.0:
        return f"its SwiGLU clamp is {config.swiglu_limit}, and llama.cpp's gpt-oss graph fixes 7"
    pattern = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(config.num_hidden_layers)]
    if list(getattr(config, "layer_types", None) or pattern) != pattern:
        return "its layer types do not alternate sliding and full attention from the first layer, as llama.cpp's do"
    return None


def _smollm3_layers(config: Any) -> str | None:
    """llama.cpp's smollm3 graph leaves RoPE out of every 4th layer, as SmolLM3 ships; another pattern is refused."""
    pattern = [int((i + 1) % 4 != 0) for i in range(config.num_hidden_layers)]
    if list(getattr(config, "no_rope_layers", None) or pattern) != pattern:
        return "its layers without RoPE (no_rope_layers) are not every 4th, which llama.cpp's smollm3 graph fixes"
    return None


def _gemma(writer: Any, config: Any) -> None:
    """Gemma 2/3: the sliding window and the soft caps llama.cpp's graphs read (the converter's keys)."""
    if getattr(config, "sliding_window", None):
        writer.add_sliding_window(int(config.sliding_window))
    if getattr(config, "attn_logit_softcapping", None):
        writer.add_attn_logit_softcapping(float(config.attn_logit_softcapping))
    if getattr(config, "final_logit_softcapping", None):
        writer.add_final_logit_softcapping(float(config.final_logit_softcapping))


def _gemma_layers(config: Any, every: int, big: int) -> str | None:
    """What llama.cpp's gemma2/gemma3 graphs fix that a config can set otherwise: the query scale (1/sqrt(head
    size), or 1/sqrt(hidden / heads) in the 27B's layer count ``big``), every ``every``-th layer global, the rest
    sliding, and (Gemma 3) the local layers' RoPE base 10000."""
    head_dim = config.head_dim
    scalar = getattr(config, "query_pre_attn_scalar", head_dim)
    if scalar != head_dim and not (config.num_hidden_layers == big
                                   and scalar == config.hidden_size // config.num_attention_heads):
        return f"its query_pre_attn_scalar ({scalar}) is not its head size ({head_dim}), as llama.cpp's graph takes it"
    pattern = ["full_attention" if (i + 1) % every == 0 else "sliding_attention"
               for i in range(config.num_hidden_layers)]
    if list(getattr(config, "layer_types", None) or pattern) != pattern:
        return f"its layer types are not llama.cpp's fixed pattern (every {every}th layer global)"
    local = (getattr(config, "rope_parameters", None) or {}).get("sliding_attention") or {}
    if every == 6 and float(local.get("rope_theta", getattr(config, "rope_local_base_freq", 10000.0))) != 10000.0:
        return "its sliding layers' RoPE base is not 10000, which llama.cpp's gemma3 graph fixes"
    return None


# llama.cpp's CPU GELU is a float16 table (ggml_vec_gelu_f32 under GGML_GELU_FP16: input and output rounded to float16).
# On the suite's tiny Gemma 2 that alone moves the logits by 2.3e-4 (3.5e-4 of the largest); transformers with the same
# rounding done in torch comes within 3e-7 on one prompt and 1.2e-4 of the largest logit over the test prompts (values
# on a float16 rounding boundary go either way). So Gemma files are gated at 1e-3 of the largest logit, not GGUF's
# 5e-5, and the record says why (GELU_TABLE, 1e-3: defined with the encoders, which gguf_families imports).
GELU_NOTE = ("llama.cpp's CPU GELU rounds through a float16 table, so its logits are checked against the masked "
             f"original's within {GELU_TABLE:g} of the largest logit (GGUF's usual 5e-05 elsewhere)")


_TANH_GELU = ("gelu_pytorch_tanh",)
# llama.cpp's gpt2 and gptneox graphs compute GELU's tanh form (ggml_gelu, through the float16 table); Pythia's configs
# name the exact (erf) GELU, which differs from it by at most 4.7e-4 (a note says so; within the same gate here).
_GPT_GELU = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")
ERF_GELU_NOTE = ("the checkpoint's MLP computes the exact (erf) GELU, llama.cpp's gptneox graph its tanh form (as for "
                 "every Pythia GGUF), which moves the logits slightly (within the gate here)")


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
    "olmo": GgufFamily("olmo", True, _ONE_COUNT.format(arch="olmo") + _NO_DECI.format(
        what="weightless LayerNorm", name="OLMo"), _olmo),
    "olmo2": GgufFamily("olmo2", False, "its q/k norms are taken over all heads", None),
    "olmoe": GgufFamily("olmoe", False, "its q/k norms are taken over all heads", _experts, _olmoe),
    "gemma2": GgufFamily("gemma2", False, _ONE_COUNT.format(arch="gemma2"), _gemma,
                         lambda config: _gemma_layers(config, 2, 46), activation=_TANH_GELU,
                         norm_offset=1.0, tolerance=GELU_TABLE, sliding_window=True),
    "gemma3_text": GgufFamily("gemma3", False, _ONE_COUNT.format(arch="gemma3"), _gemma,
                              lambda config: _gemma_layers(config, 6, 62), activation=_TANH_GELU,
                              norm_offset=1.0, tolerance=GELU_TABLE, sliding_window=True),
    "glm4": GgufFamily("glm4", False, _ONE_COUNT.format(arch="glm4"), None),
    "gpt_oss": GgufFamily("gpt-oss", False, _ONE_COUNT.format(arch="gpt-oss") + _NO_DECI.format(
        what="attention sinks or experts", name="GPT-OSS"), _gpt_oss, _gpt_oss_layers,
        interleaved_experts=True, sliding_window=True),
    "gemma": GgufFamily("gemma", False, _ONE_COUNT.format(arch="gemma"), None, activation=_TANH_GELU,
                        norm_offset=1.0, tolerance=GELU_TABLE),
    "glm": GgufFamily("chatglm", False, _ONE_COUNT.format(arch="chatglm"), None),
    "smollm3": GgufFamily("smollm3", True, _ONE_COUNT.format(arch="smollm3"), None, _smollm3_layers),
    "cohere": GgufFamily("command-r", False, _ONE_COUNT.format(arch="command-r"), _cohere, _cohere_norms),
    "gpt2": GgufFamily("gpt2", False, _ONE_COUNT.format(arch="gpt2") + " (its fused attn_qkv is sized by it)",
                       _layer_norm, _gpt2_attention, activation=_GPT_GELU, tolerance=GELU_TABLE, gated=False,
                       rotary=False, qkv_layout="gpt2", ffn_length=lambda c: int(c.n_inner or 4 * c.n_embd)),
    "gpt_neox": GgufFamily("gptneox", False, _ONE_COUNT.format(arch="gptneox") + " (its fused attn_qkv is sized by "
                           "it)", _neox, _neox_biases, activation=("gelu", *_GPT_GELU), tolerance=GELU_TABLE,
                           gated=False, qkv_layout="neox", own_output=True),
    **{t: GgufFamily(**spec) for t, spec in ENCODERS.items()},  # bare encoders: encoders
}
MODEL_TYPES = tuple(t for t, f in FAMILIES.items() if not f.encoder)
ENCODER_TYPES = tuple(t for t, f in FAMILIES.items() if f.encoder)
# Families headprune writes as GGUF only in the dense layout, and why (the refusal of a sliced one says it).
DENSE_ONLY = {t: f.dense_only for t, f in FAMILIES.items() if f.dense_only}
OTHER_FORMATS = "safetensors, onnx"
# RoPE scalings llama.cpp's graphs compute as transformers does. "dynamic" (NTK) rescales only past the trained context
# in transformers, and llama.cpp never does: written as plain RoPE with a note. "llama3" needs llama.cpp's rope_freqs
# tensor, which only its llama and deci graphs read; "longrope" (Phi-3.5, Phi-4-mini) its rope_factors tensors, read
# by its phi3 graph. The others are not written.
ROPE_TYPES = ("default", "linear", "llama3", "yarn", "dynamic", "longrope")
ROPE_FACTOR_ARCHES = {"llama3": ("llama", "deci"), "longrope": ("phi3",)}
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
    arch = "deci" if layout == "sliced" else "llama" if model_type == "qwen2" and kind == "llama3" else \
        FAMILIES[model_type].arch
    if arch not in ROPE_FACTOR_ARCHES.get(kind, (arch,)):
        raise UnsupportedModelError(f"{lm.name}: RoPE type {kind!r} is not written to GGUF for {model_type}: only "
                                    f"llama.cpp's {' and '.join(ROPE_FACTOR_ARCHES[kind])} graphs read its factors "
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

