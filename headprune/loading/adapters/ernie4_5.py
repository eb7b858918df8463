"""ERNIE 4.5 (``Ernie4_5ForCausalLM``, model type ``ernie4_5``) and ERNIE 4.5 MoE (``ernie4_5_moe``): laid out as Llama
(``model.layers[i].self_attn.{q,k,v,o}_proj``, grouped-query attention). Their RoPE rotates adjacent pairs of each
head's query and key, within the head. The MoE's routers, experts and shared experts are never touched.

GGUF: llama.cpp's ``ernie4_5`` and ``ernie4_5-moe`` graphs (adjacent pairs, as the checkpoint has them: no
permutation), which take one head count for every layer; a sliced ERNIE 4.5 is llama.cpp's ``deci`` (a plain Llama
layer, with per-layer head counts, rotating adjacent pairs too); the MoE is dense only.
"""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, one_count
from headprune.loading.adapters.llama import GQA, LLAMA
from headprune.loading.adapters.moe import MOE


def _biases(config: Any) -> str | None:
    if getattr(config, "use_bias", False):
        return "it has biases (use_bias), and llama.cpp's ernie4_5 graphs add none to the output projection or MLP"
    return None


def _moe(config: Any) -> str | None:
    """llama.cpp's ernie4_5-moe graph puts experts in every layer from the first MoE one on (every step-th)."""
    last = config.num_hidden_layers - 1
    if config.moe_layer_interval != 1 or config.moe_layer_end_index < last:
        return ("its mixture-of-experts layers are not every layer from moe_layer_start_index to the last, as "
                "llama.cpp's ernie4_5-moe graph has them")
    return _biases(config)


def _moe_keys(writer: Any, config: Any) -> None:
    """The converter's ``Ernie4_5MoeModel``: experts, the leading dense layers, the shared experts' width."""
    writer.add_expert_count(int(config.moe_num_experts))
    writer.add_expert_used_count(int(config.moe_k))
    writer.add_interleave_moe_layer_step(int(config.moe_layer_interval))
    writer.add_leading_dense_block_count(int(config.moe_layer_start_index))
    writer.add_expert_feed_forward_length(int(config.moe_intermediate_size))
    writer.add_expert_shared_count(int(config.moe_num_shared_experts))
    if config.moe_num_shared_experts:
        writer.add_expert_shared_feed_forward_length(int(config.moe_intermediate_size * config.moe_num_shared_experts))


_PAIRS = "RoPE on adjacent pairs, within each head"
register(
    Family("ernie4_5", LLAMA, TinyModel("Ernie4_5Config", "Ernie4_5ForCausalLM", dict(GQA, head_dim=16)),
           Gguf("ernie4_5", pairs=True, refuse=_biases,
                holds=("blk.0.attn_q.weight", "ernie4_5.rope.dimension_count"),
                refused=({"use_bias": True}, "use_bias")),
           genai="ernie4_5", note=_PAIRS),
    Family("ernie4_5_moe", MOE, TinyModel("Ernie4_5_MoeConfig", "Ernie4_5_MoeForCausalLM", dict(
        GQA, head_dim=16, moe_intermediate_size=32, moe_k=2, moe_num_experts=4, moe_num_shared_experts=1)),
        Gguf("ernie4_5-moe", dense_only=one_count("ernie4_5-moe", "experts", "ERNIE 4.5 MoE"), keys=_moe_keys,
             refuse=_moe, renamed=(("mlp.gate.moe_statics.", "mlp.moe_statics."),),
             holds=("blk.1.ffn_up_shexp.weight", "ernie4_5-moe.leading_dense_block_count"),
             refused=({"moe_layer_interval": 2}, "not every layer from moe_layer_start_index")),
        note=f"{_PAIRS}; routers and experts untouched"),
)
