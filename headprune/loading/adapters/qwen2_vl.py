"""Qwen2-VL and Qwen2.5-VL (``Qwen2VLForConditionalGeneration``, ``Qwen2_5_VLForConditionalGeneration``; model types
``qwen2_vl``, ``qwen2_5_vl``): the language model's heads, ``model.language_model.layers[i].self_attn.{q,k,v,o}_proj``
(q, k and v with a bias), sized by ``config.text_config``. Multimodal RoPE rotates each head's query and key on their
own (its sections split the head size, not the heads), so removing whole heads is exact. The vision tower
(``model.visual``, with its merger into the language model) is never touched: the pruned checkpoint still reads images.
"""

from headprune.loading.adapters.base import VISION_LANGUAGE, Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.llama import GQA

QWEN2_VL = Adapter(family="qwen2_vl", **VISION_LANGUAGE)  # type: ignore[arg-type]
# M-RoPE: the sections of each head's 8 rotary frequencies (temporal, height, width); a 4 x 4 patch image merged
# 2 x 2: 4 image tokens
_MROPE = dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3])
_IDS = ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")
_TOWER = dict(patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
register(
    Family("qwen2_vl", QWEN2_VL, TinyModel("Qwen2VLConfig", "Qwen2VLForConditionalGeneration", dict(
        text_config=dict(GQA, rope_parameters=_MROPE), vision_config=dict(
            depth=1, embed_dim=32, num_heads=2, hidden_size=64, mlp_ratio=2, **_TOWER), image_ids=_IDS)),
        note="multimodal RoPE acts within a head; the vision tower kept"),
    Family("qwen2_5_vl", QWEN2_VL, TinyModel("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration", dict(
        text_config=dict(GQA, rope_parameters=_MROPE), vision_config=dict(
            depth=2, hidden_size=32, num_heads=2, intermediate_size=64, out_hidden_size=64, window_size=56,
            fullatt_block_indexes=[1], **_TOWER), image_ids=_IDS)),
        note="multimodal RoPE acts within a head; the vision tower kept"),
)
