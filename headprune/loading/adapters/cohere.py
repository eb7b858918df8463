"""Cohere (Command R): Llama-style projections ``model.layers[i].self_attn.{q,k,v,o}_proj`` beside a parallel MLP.

Command R+ sets ``use_qk_norm``: a LayerNorm with a weight per head over q and k, which headprune does not slice.
"""

from headprune.loading.adapters.base import Adapter

COHERE = Adapter(
    family="cohere",
    model_types=("cohere",),
    layers_path="layers",
    attention_path="self_attn",
    output_projection_path="self_attn.o_proj",
    kv_heads_attr="num_key_value_heads",
    qkv_paths=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    unsupported_settings=(("use_qk_norm", "per-head q/k LayerNorms (Command R+) are not sliced by headprune; "
                                          "Cohere models without them (Command R) are supported"),),
)
