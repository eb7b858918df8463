"""Qwen2-VL and Qwen2.5-VL (``Qwen2VLForConditionalGeneration``, ``Qwen2_5_VLForConditionalGeneration``; model types
``qwen2_vl``, ``qwen2_5_vl``): the language model's heads, ``model.language_model.layers[i].self_attn.{q,k,v,o}_proj``
(q, k and v with a bias), sized by ``config.text_config``. Multimodal RoPE rotates each head's query and key on their
own (its sections split the head size, not the heads), so removing whole heads is exact. The vision tower
(``model.visual``, with its merger into the language model) is never touched: the pruned checkpoint still reads images.
"""

from headprune.loading.adapters.base import VISION_LANGUAGE, Adapter

QWEN2_VL = Adapter(
    family="qwen2_vl",
    model_types=("qwen2_vl", "qwen2_5_vl"),
    **VISION_LANGUAGE,  # type: ignore[arg-type]
)
