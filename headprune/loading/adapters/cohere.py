"""Cohere (Command R, R+): Llama-style projections ``model.layers[i].self_attn.{q,k,v,o}_proj`` beside a parallel
MLP. Command R+ sets ``use_qk_norm``: LayerNorms over each head's query and key with a weight row per head
(``q_norm.weight``: ``(heads, head_dim)``), sliced with their heads."""

from headprune.loading.adapters.base import Adapter

COHERE = Adapter(
    family="cohere",
    model_types=("cohere",),
    layers_path="layers",
    attention_path="self_attn",
    output_projection_path="self_attn.o_proj",
    kv_heads_attr="num_key_value_heads",
    qkv_paths=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    head_params=(("self_attn.q_norm.weight", "q"), ("self_attn.k_norm.weight", "kv")),
)
