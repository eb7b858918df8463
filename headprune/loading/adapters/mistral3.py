"""Ministral 3 (``Ministral3ForCausalLM``, model type ``ministral3``) and Mistral 3 as shipped
(``Mistral3ForConditionalGeneration``, ``mistral3``: Mistral Small 3.1/3.2 around a ``mistral`` language model,
Ministral 3 around a ``ministral3`` one, Mistral Small 4 around a ``mistral4`` one, whose latent attention keeps its
heads as :mod:`headprune.loading.adapters.deepseek` says).

Ministral 3 is laid out as Llama (``model.layers[i].self_attn.{q,k,v,o}_proj``, grouped-query attention); its queries
are multiplied by one scale a position (Llama 4's, ``1 + beta * log(1 + floor(position / original context))``), the
same for every head, so removing heads is exact. Mistral 3's heads are its language model's,
``model.language_model.layers[i].self_attn.*``, sized by ``config.text_config``; the Pixtral vision tower and the
projector (with its patch merger) are never touched.

GGUF: llama.cpp's ``mistral3`` graph (the converter's ``Ministral3Model``: YaRN, the query scale as its attention
temperature, q/k rows permuted as Llama's) takes one head count for every layer: dense only.
"""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.base import VISION_LANGUAGE, Adapter
from headprune.loading.adapters.deepseek import LATENT
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, one_count
from headprune.loading.adapters.llama import GQA, LLAMA

# Mistral Small 4 as shipped: Mistral 3 around a mistral4 language model, whose latent attention keeps its heads
# as DeepSeek-V3's
MISTRAL3_LATENT = Adapter(**{**VISION_LANGUAGE, **LATENT, "family": "mistral3_latent",  # type: ignore[arg-type]
                             "layers_path": "language_model.layers", "kv_heads_attr": None})
MISTRAL3 = Adapter(family="mistral3", **VISION_LANGUAGE,  # type: ignore[arg-type]
                   text_model_types=("mistral", "ministral3", "mistral4"), text_adapters={"mistral4": MISTRAL3_LATENT})
# YaRN as Ministral 3 ships it, with an original context of 4 tokens, so that the test prompts reach the query scale
_YARN = dict(rope_type="yarn", rope_theta=10000.0, factor=16.0, original_max_position_embeddings=4, beta_fast=32.0,
             beta_slow=1.0, mscale=1.0, mscale_all_dim=1.0, llama_4_scaling_beta=0.1)


def _yarn(config: Any) -> str | None:
    """llama.cpp's mistral3 graph takes the query scale's original context from YaRN's and assumes mscale 1 (the
    converter asserts YaRN)."""
    rope = getattr(config, "rope_parameters", None) or {}
    if rope.get("rope_type") != "yarn" or not rope.get("llama_4_scaling_beta"):
        return "its RoPE is not YaRN with a query scale (llama_4_scaling_beta), which llama.cpp's mistral3 graph reads"
    if rope.get("attention_factor") is not None or float(rope.get("mscale") or 1.0) != 1.0:
        return "its YaRN sets attention_factor or an mscale other than 1, which llama.cpp's mistral3 graph recomputes"
    return None


def _keys(writer: Any, config: Any) -> None:
    """The converter's ``Ministral3Model``: the query scale (attention temperature) and YaRN's mscale_all_dim and
    betas; the original context (the scale's floor) is YaRN's, written with the RoPE keys."""
    rope = config.rope_parameters
    writer.add_attn_temperature_scale(float(rope["llama_4_scaling_beta"]))
    writer.add_rope_scaling_yarn_log_mul(float(rope.get("mscale_all_dim") or 0.0))
    writer.add_rope_scaling_yarn_beta_fast(float(rope.get("beta_fast") or 32.0))
    writer.add_rope_scaling_yarn_beta_slow(float(rope.get("beta_slow") or 1.0))


register(
    Family("ministral3", LLAMA, TinyModel("Ministral3Config", "Ministral3ForCausalLM", dict(
        GQA, head_dim=16, rope_parameters=_YARN)),
        Gguf("mistral3", permuted=True, dense_only=one_count("mistral3", "query scale", "Ministral 3"), keys=_keys,
             refuse=_yarn, holds=("blk.0.attn_q.weight", "mistral3.attention.temperature_scale"),
             refused=({"rope_parameters": dict(_YARN, mscale=2.0)}, "an mscale other than 1")),
        genai="mistral3_text", note="its query scale by position acts on every head alike"),
    Family("mistral3", MISTRAL3, TinyModel("Mistral3Config", "Mistral3ForConditionalGeneration", dict(
        text_config=dict(GQA, head_dim=16, model_type="ministral3"), vision_config=dict(
            model_type="pixtral", hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            head_dim=16, image_size=56, patch_size=14),  # a 56 x 56 image: 4 x 4 patches merged 2 x 2
        image_ids=("image_token_index",))),
        note="Mistral Small 3.1/3.2, Ministral 3 and Mistral Small 4 as shipped (a mistral, ministral3 or mistral4 "
             "language model); the vision tower kept"),
)
