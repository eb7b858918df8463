"""GPT-OSS: Llama-style projections ``model.layers[i].self_attn.{q,k,v,o}_proj`` (with biases) and a learned
attention sink per query head (``self_attn.sinks``: an extra logit in that head's softmax), sliced with its head.

The mixture-of-experts MLP (router and experts) is never touched; sliding-window and full layers alternate.
"""

from headprune.loading.adapters.base import Adapter

GPT_OSS = Adapter(
    family="gpt_oss",
    model_types=("gpt_oss",),
    layers_path="layers",
    attention_path="self_attn",
    output_projection_path="self_attn.o_proj",
    kv_heads_attr="num_key_value_heads",
    qkv_paths=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    head_params=(("self_attn.sinks", "q"),),
)
