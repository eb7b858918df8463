"""OLMo-2 and OLMoE: Llama-style projections ``model.layers[i].self_attn.{q,k,v,o}_proj``, with RMS norms over
the whole query (every head at once) and the whole key.

That norm divides each head's query by a root mean square taken over all heads, removed ones included, so a model
without a head's q rows computes other queries for the heads it keeps: no sliced model equals the masked one. The
dense layout (the head's output-projection columns zeroed) is exact. OLMoE's router and experts are untouched.
"""

from headprune.loading.adapters.base import Adapter

OLMO2 = Adapter(
    family="olmo2",
    model_types=("olmo2", "olmoe"),
    layers_path="layers",
    attention_path="self_attn",
    output_projection_path="self_attn.o_proj",
    kv_heads_attr="num_key_value_heads",
    qkv_paths=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    dense_only="its q/k RMS norms are taken over all heads at once, so removing a head's rows changes the queries "
               "and keys of the heads kept",
)
