"""GPT-NeoX / Pythia: ``gpt_neox.layers[i].attention`` with a per-head interleaved ``query_key_value``
(rows laid out as ``[head][q|k|v][head_dim]``) and the output projection ``dense``."""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.base import Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import GELU_TABLE, GPT_GELU, Gguf, layer_norm_keys, one_count

NEOX = Adapter(
    family="gpt_neox",
    layers_path="layers",
    attention_path="attention",
    output_projection_path="attention.dense",
    qkv_layout="neox",
    qkv_paths=("attention.query_key_value",),
    count_attrs=("num_attention_heads",),
)


def _keys(writer: Any, config: Any) -> None:
    """GPT-NeoX (the converter's ``GPTNeoXModel``): attention and MLP in parallel or one after the other."""
    layer_norm_keys(writer, config)
    writer.add_parallel_residual(bool(getattr(config, "use_parallel_residual", True)))


def _biases(config: Any) -> str | None:
    if not getattr(config, "attention_bias", True):
        return "its attention has no biases (attention_bias false), which llama.cpp's gptneox graph reads"
    return None


register(Family("gpt_neox", NEOX, TinyModel("GPTNeoXConfig", "GPTNeoXForCausalLM"),
                Gguf("gptneox", dense_only=one_count("gptneox") + " (its fused attn_qkv is sized by it)", keys=_keys,
                     refuse=_biases, activation=("gelu", *GPT_GELU), tolerance=GELU_TABLE, gated=False,
                     own_output=True, holds=("blk.0.attn_qkv.bias", "gptneox.use_parallel_residual")),  # a quarter
                note="Pythia"))  # of each head rotated
