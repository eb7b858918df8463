"""GPT-OSS: Llama-style projections ``model.layers[i].self_attn.{q,k,v,o}_proj`` (with biases) and a learned
attention sink per query head (``self_attn.sinks``: an extra logit in that head's softmax), sliced with its head.

The mixture-of-experts MLP (router and experts) is never touched; sliding-window and full layers alternate.
"""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.base import LLAMA_STYLE, Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, expert_keys, one_count
from headprune.loading.adapters.moe import MOE_TINY

GPT_OSS = Adapter(family="gpt_oss", **LLAMA_STYLE, head_params=(("self_attn.sinks", "q"),))  # type: ignore[arg-type]


def _keys(writer: Any, config: Any) -> None:
    """GPT-OSS (the converter's ``GptOssModel``): experts of the config's intermediate size, the sliding window."""
    expert_keys(writer, config)
    writer.add_expert_feed_forward_length(int(config.intermediate_size))
    writer.add_sliding_window(int(config.sliding_window))


def _layers(config: Any) -> str | None:
    """llama.cpp's gpt-oss graph fixes the SwiGLU clamp (7) and the layers' pattern (sliding first, alternating)."""
    if float(getattr(config, "swiglu_limit", 7.0)) != 7.0:
        return f"its SwiGLU clamp is {config.swiglu_limit}, and llama.cpp's gpt-oss graph fixes 7"
    pattern = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(config.num_hidden_layers)]
    if list(getattr(config, "layer_types", None) or pattern) != pattern:
        return "its layer types do not alternate sliding and full attention from the first layer, as llama.cpp's do"
    return None


register(Family(
    "gpt_oss", GPT_OSS, TinyModel("GptOssConfig", "GptOssForCausalLM", dict(
        MOE_TINY, num_local_experts=4, head_dim=16, sliding_window=4)),
    Gguf("gpt-oss", dense_only=one_count("gpt-oss", "attention sinks or experts", "GPT-OSS"), keys=_keys,
         refuse=_layers, experts="interleaved", sliding_window=True,
         holds=("blk.0.attn_sinks.weight", "gpt-oss.attention.sliding_window")),  # the tiny model's 4-token window
    genai="gptoss", note="each head's attention sink goes with its head; experts untouched"))
