"""RoPE scalings as llama.cpp reads them from a GGUF file: the keys, and the tensors of factors its graphs take.

From llama.cpp's converter: ``LlamaModel.generate_extra_tensors`` (Llama 3.1's ``rope_freqs``) and
``Phi3MiniModel`` (Phi-3.5/Phi-4-mini's ``longrope``: ``rope_factors_long``/``_short`` and the attention factor).
Which RoPE types each family may carry: :mod:`headprune.exporter.gguf.families`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from headprune.exporter.gguf.families import rope_parameters


def rope_tensors(config: Any, head_dim: int) -> dict[str, torch.Tensor]:
    """The tensors llama.cpp derives from the config's RoPE scaling (not weights of the model, but part of what the
    file holds, so the read-back expects them too)."""
    import gguf

    rope = rope_parameters(config)
    kind = rope.get("rope_type", "default")
    if kind == "llama3":
        return {gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight": _llama3_rope_factors(rope, head_dim)}
    if kind == "longrope":
        names = gguf.TENSOR_NAMES
        return {names[gguf.MODEL_TENSOR.ROPE_FACTORS_LONG] + ".weight": torch.tensor(rope["long_factor"]).float(),
                names[gguf.MODEL_TENSOR.ROPE_FACTORS_SHORT] + ".weight": torch.tensor(rope["short_factor"]).float()}
    if kind == "proportional":  # (the converter's Gemma4Model.generate_extra_tensors)
        rotated = int(head_dim * float(rope.get("partial_rotary_factor", 1.0)) / 2)
        factors = [1.0] * rotated + [1e30] * (head_dim // 2 - rotated)  # a frequency of ~0: cos 1, sin 0
        return {gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight": torch.tensor(factors)}
    return {}


def rope_dimensions(config: Any, head_dim: int) -> int:
    """The dimensions of a head llama.cpp rotates (``rope.dimension_count``): ``partial_rotary_factor`` of it, but
    all of it for proportional RoPE, whose ``rope_freqs`` stop the others (transformers gives them frequency 0 and
    measures the rotated ones' frequencies over the whole head)."""
    rope = rope_parameters(config)
    share = 1.0 if rope.get("rope_type") == "proportional" else float(rope.get("partial_rotary_factor", 1.0))
    return int(head_dim * share)


def add_rope_keys(writer: Any, config: Any) -> None:
    """The scaling's keys (``rope.scaling.*``); plain RoPE has none."""
    import gguf

    rope = rope_parameters(config)
    kind = rope.get("rope_type", "default")
    if kind == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(rope["factor"]))
    elif kind == "yarn":
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(float(rope["factor"]))
        writer.add_rope_scaling_orig_ctx_len(int(rope["original_max_position_embeddings"]))
    elif kind == "longrope":
        writer.add_rope_scaling_orig_ctx_len(int(_original_context(config, rope)))
        writer.add_rope_scaling_attn_factors(longrope_attention_factor(config))


def _original_context(config: Any, rope: dict) -> int:
    return int(rope.get("original_max_position_embeddings") or config.original_max_position_embeddings)


def longrope_attention_factor(config: Any) -> float:
    """The cos/sin scale of LongRoPE, as transformers computes it (``_compute_longrope_parameters``): the config's
    own, else sqrt(1 + ln(factor) / ln(original context)), the factor being the context's growth."""
    rope = rope_parameters(config)
    if rope.get("attention_factor") is not None:
        return float(rope["attention_factor"])
    original = _original_context(config, rope)
    factor = rope.get("factor") or config.max_position_embeddings / original
    return 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))


def rope_notes(config: Any) -> list[str]:
    """What differs between llama.cpp and transformers for the config's RoPE scaling, for the record and card."""
    rope = rope_parameters(config)
    kind = rope.get("rope_type")
    if kind == "longrope":
        original = _original_context(config, rope)
        return [f"LongRoPE: llama.cpp takes the long factors for every token when run with a context over {original} "
                f"tokens, transformers only for sequences longer than that: the two agree with a llama.cpp context of "
                f"at most {original} tokens"]
    if kind == "yarn" and rope.get("truncate") is False:
        # Measured on the suite's tiny GPT-OSS: 2.3e-5 of logits up to 0.67 with truncate false, 2.4e-7 with true.
        return ["YaRN without truncation (GPT-OSS): transformers blends the frequencies between unrounded correction "
                "dimensions, llama.cpp between rounded ones, which moves the logits slightly (within the gate here)"]
    return []


def _llama3_rope_factors(rope: dict, dim: int) -> torch.Tensor:
    """``rope_freqs.weight`` for Llama 3.1-style scaling (the converter's ``generate_extra_tensors``)."""
    base = rope.get("rope_theta", 10000.0)
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor = rope.get("factor", 8.0)
    low, high = rope.get("low_freq_factor", 1.0), rope.get("high_freq_factor", 4.0)
    old = rope.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old / low, old / high
    factors = []
    for freq in freqs.tolist():
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1.0)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(factors, dtype=torch.float32)
