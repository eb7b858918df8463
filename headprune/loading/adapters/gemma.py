"""Gemma, Gemma 2 and Gemma 3: decoders laid out as Llama (``model.layers[i].self_attn.{q,k,v,o}_proj``, ``head_dim``
set explicitly), and Gemma 3 as shipped (``Gemma3ForConditionalGeneration``, model type ``gemma3``): the language
model's heads, ``model.language_model.layers[i].self_attn.{q,k,v,o}_proj`` as in Gemma 3's text model, sized by
``config.text_config``. The vision tower and the projector into the language model are never touched, so the pruned
checkpoint still reads images.

GGUF: llama.cpp's gemma graphs scale RMSNorm by (1 + w) where transformers does, so gains are written plus one, and
compute GELU through a float16 table (the gate's tolerance, ``GELU_TABLE``).
"""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.base import VISION_LANGUAGE, Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import GELU_TABLE, TANH_GELU, Gguf, one_count
from headprune.loading.adapters.llama import GQA, LLAMA

GEMMA3 = Adapter(family="gemma3", **VISION_LANGUAGE)  # type: ignore[arg-type]
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, image_size=28,
              patch_size=14)  # the tiny vision-language models' one-layer vision tower


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


_GEMMA = dict(activation=TANH_GELU, norm_offset=1.0, tolerance=GELU_TABLE)
register(
    Family("gemma", LLAMA, TinyModel("GemmaConfig", "GemmaForCausalLM", dict(GQA, head_dim=16)),
           Gguf("gemma", dense_only=one_count("gemma"), holds=("blk.0.attn_norm.weight", "gemma.attention.key_length"),
                **_GEMMA), genai="gemma"),
    Family("gemma2", LLAMA, TinyModel("Gemma2Config", "Gemma2ForCausalLM", dict(GQA, head_dim=16)),
           Gguf("gemma2", dense_only=one_count("gemma2"), keys=_gemma, refuse=lambda c: _gemma_layers(c, 2, 46),
                sliding_window=True, holds=("blk.0.post_ffw_norm.weight", "gemma2.final_logit_softcapping"),
                variant={"query_pre_attn_scalar": 16}, **_GEMMA), genai="gemma2"),
    Family("gemma3_text", LLAMA, TinyModel("Gemma3TextConfig", "Gemma3ForCausalLM", dict(GQA, head_dim=16)),
           Gguf("gemma3", dense_only=one_count("gemma3"), keys=_gemma, refuse=lambda c: _gemma_layers(c, 6, 62),
                sliding_window=True, holds=("blk.0.attn_q_norm.weight", "gemma3.attention.sliding_window"),
                variant={"query_pre_attn_scalar": 16}, **_GEMMA), genai="gemma3_text"),
    Family("gemma3", GEMMA3, TinyModel("Gemma3Config", "Gemma3ForConditionalGeneration", dict(
        text_config=dict(GQA, head_dim=16), mm_tokens_per_image=4, vision_config=VISION,
        image_ids=("image_token_index", "boi_token_index", "eoi_token_index"))),
        note="Gemma 3 4B-27B as shipped: the vision tower kept"),
)
