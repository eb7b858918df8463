"""Qwen2-VL and Qwen2.5-VL (``Qwen2VLForConditionalGeneration``, ``Qwen2_5_VLForConditionalGeneration``; model types
``qwen2_vl``, ``qwen2_5_vl``): the language model's heads, ``model.language_model.layers[i].self_attn.{q,k,v,o}_proj``
(q, k and v with a bias), sized by ``config.text_config``. Multimodal RoPE rotates each head's query and key on their
own (its sections split the head size, not the heads), so removing whole heads is exact. The vision tower
(``model.visual``, with its merger into the language model) is never touched: the pruned checkpoint still reads images.
"""

from headprune.loading.adapters.base import Adapter

QWEN2_VL = Adapter(
    family="qwen2_vl",
    model_types=("qwen2_vl", "qwen2_5_vl"),
    layers_path="language_model.layers",
    attention_path="self_attn",
    output_projection_path="self_attn.o_proj",
    kv_heads_attr="num_key_value_heads",
    qkv_paths=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    text_config="text_config",
)
