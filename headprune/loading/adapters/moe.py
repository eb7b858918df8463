"""Mixture-of-experts decoders whose attention is Llama-style: Mixtral, Qwen3-MoE.

Only attention heads are removed: ``model.layers[i].self_attn.{q,k,v,o}_proj`` as in Llama (Qwen3-MoE's q/k norms
act within a head). The router and the experts (``mlp`` / ``block_sparse_moe``) are never touched, so every token
goes to the experts it went to, given the same attention output.
"""

from headprune.loading.adapters.base import Adapter

MOE = Adapter(
    family="moe",
    model_types=("mixtral", "qwen3_moe"),
    layers_path="layers",
    attention_path="self_attn",
    output_projection_path="self_attn.o_proj",
    kv_heads_attr="num_key_value_heads",
    qkv_paths=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
)
