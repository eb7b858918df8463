"""OLMo-2 and OLMoE: Llama-style projections ``model.layers[i].self_attn.{q,k,v,o}_proj``, with RMS norms over
the whole query (every head at once) and the whole key.

That norm divides each head's query by a root mean square taken over all heads, removed ones included, so a model
without a head's q rows computes other queries for the heads it keeps: no sliced model equals the masked one. The
dense layout (the head's output-projection columns zeroed) is exact. OLMoE's router and experts are untouched.
"""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.base import LLAMA_STYLE, Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, expert_keys
from headprune.loading.adapters.llama import GQA
from headprune.loading.adapters.moe import MOE_TINY

OLMO2 = Adapter(family="olmo2", **LLAMA_STYLE,  # type: ignore[arg-type]
                dense_only="its q/k RMS norms are taken over all heads at once, so removing a head's rows changes the "
                           "queries and keys of the heads kept")
_NORMS = "its q/k norms are taken over all heads"


def _olmoe(config: Any) -> str | None:
    if config.num_key_value_heads != config.num_attention_heads:
        return "it groups key/value heads, and llama.cpp's olmoe graph sizes the k norm by all query heads"
    return None


register(
    Family("olmo2", OLMO2, TinyModel("Olmo2Config", "Olmo2ForCausalLM", GQA),
           Gguf("olmo2", dense_only=_NORMS, holds=("blk.0.attn_q_norm.weight", "olmo2.attention.layer_norm_rms_epsilon")),
           note="dense only: q/k norms over all heads at once"),
    Family("olmoe", OLMO2, TinyModel("OlmoeConfig", "OlmoeForCausalLM", dict(MOE_TINY, num_experts=4)),
           Gguf("olmoe", dense_only=_NORMS, keys=expert_keys, refuse=_olmoe,
                holds=("blk.0.ffn_up_exps.weight", "olmoe.expert_count"), variant={"num_key_value_heads": 4}),
           note="dense only: q/k norms over all heads at once; routers and experts untouched"),
)
