"""Phi-3 and Phi-4 (``phi3``): ``model.layers[i].self_attn`` with one fused ``qkv_proj`` whose rows are the query
heads, then the key heads, then the value heads (grouped-query), and the output projection ``o_proj``.

Slicing takes each kept head's rows out of the fused projection and writes them back fused, in the same order.
"""

from headprune.loading.adapters.base import Adapter

PHI3 = Adapter(
    family="phi3",
    model_types=("phi3",),
    layers_path="layers",
    attention_path="self_attn",
    output_projection_path="self_attn.o_proj",
    kv_heads_attr="num_key_value_heads",
    qkv_layout="fused",
    qkv_paths=("self_attn.qkv_proj",),
)
