"""Gemma 3 as shipped (``Gemma3ForConditionalGeneration``, model type ``gemma3``): the language model's heads,
``model.language_model.layers[i].self_attn.{q,k,v,o}_proj`` as in Gemma 3's text model, sized by
``config.text_config``. The vision tower and the projector into the language model are never touched, so the
pruned checkpoint still reads images.
"""

from headprune.loading.adapters.base import Adapter

GEMMA3 = Adapter(
    family="gemma3",
    model_types=("gemma3",),
    layers_path="language_model.layers",
    attention_path="self_attn",
    output_projection_path="self_attn.o_proj",
    kv_heads_attr="num_key_value_heads",
    qkv_paths=("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
    text_config="text_config",
)
