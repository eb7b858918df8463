"""Seed-OSS (``SeedOssForCausalLM``, model type ``seed_oss``): laid out as Llama
(``model.layers[i].self_attn.{q,k,v,o}_proj``, grouped-query attention, q/k/v biases), as Qwen2 is.

GGUF: llama.cpp's ``seed_oss`` graph for the dense layout; a sliced file is llama.cpp's ``deci`` (per-layer head
counts, q/k/v biases), as Qwen2's.
"""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf
from headprune.loading.adapters.llama import GQA, LLAMA


def _output_bias(config: Any) -> str | None:
    if getattr(config, "attention_out_bias", False):
        return "its output projection has a bias (attention_out_bias), which llama.cpp's seed_oss graph does not load"
    return None


register(Family(
    "seed_oss", LLAMA, TinyModel("SeedOssConfig", "SeedOssForCausalLM", dict(GQA, head_dim=16)),
    Gguf("seed_oss", refuse=_output_bias, holds=("blk.0.attn_q.bias", "seed_oss.attention.head_count_kv"),
         refused=({"attention_out_bias": True}, "attention_out_bias")),
    note="q/k/v biases"))
