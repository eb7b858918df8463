"""GLM-4.5, 4.6 and 4.7 (``Glm4MoeForCausalLM``, model type ``glm4_moe``): attention laid out as Llama
(``model.layers[i].self_attn.{q,k,v,o}_proj``, grouped-query attention, q/k/v biases), RoPE on part of each head,
optional RMS norms of each head's query and key (one weight of the head's size, nothing to slice); dense MLPs in the
first layers, then a mixture of experts with a shared expert, whose routers and experts are never touched.

GGUF: llama.cpp's ``glm4moe`` graph (sigmoid routing with its correction bias, the leading dense layers), which takes
one head count for every layer: dense only.
"""

from __future__ import annotations

from typing import Any

from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gguf_spec import Gguf, one_count
from headprune.loading.adapters.llama import GQA
from headprune.loading.adapters.moe import MOE, MOE_TINY


def _keys(writer: Any, config: Any) -> None:
    """The converter's ``Glm4MoeModel``: experts, the shared ones, the leading dense layers and the routing."""
    import gguf

    writer.add_expert_count(int(config.n_routed_experts))
    writer.add_expert_used_count(int(config.num_experts_per_tok))
    writer.add_expert_feed_forward_length(int(config.moe_intermediate_size))
    writer.add_expert_shared_count(int(config.n_shared_experts))
    writer.add_leading_dense_block_count(int(config.first_k_dense_replace))
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    writer.add_expert_weights_scale(float(config.routed_scaling_factor))
    writer.add_expert_weights_norm(bool(config.norm_topk_prob))


def _groups(config: Any) -> str | None:
    if getattr(config, "n_group", 1) != 1 or getattr(config, "topk_group", 1) != 1:
        return "its router picks experts within groups (n_group), which llama.cpp's glm4moe graph does not"
    return None


register(Family(
    "glm4_moe", MOE, TinyModel("Glm4MoeConfig", "Glm4MoeForCausalLM", dict(
        MOE_TINY, head_dim=16, n_routed_experts=4, moe_intermediate_size=32, first_k_dense_replace=1,
        use_qk_norm=True, attention_bias=True)),  # as GLM-4.5 ships; layer 0 dense, layer 1 experts
    Gguf("glm4moe", dense_only=one_count("glm4moe", "experts", "GLM-4.5"), keys=_keys, refuse=_groups,
         holds=("blk.1.exp_probs_b.bias", "glm4moe.leading_dense_block_count"), refused=({"n_group": 2}, "n_group")),
    note="partial RoPE, per-head q/k norms; routers and experts untouched"))
