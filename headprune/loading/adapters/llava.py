"""LLaVA (``LlavaForConditionalGeneration``, model type ``llava``: LLaVA 1.5, BakLLaVA, LLaVA-Interleave, Pixtral):
the language model's heads, ``model.language_model.layers[i].self_attn.{q,k,v,o}_proj``, sized by
``config.text_config``. LLaVA wraps a language model of any family; headprune takes those laid out as Llama (q, k, v
and o separate, grouped key/value heads through ``num_key_value_heads``) and refuses the others in one line. The vision
tower and the projector into the language model are never touched, so the pruned checkpoint still reads images.
"""

from headprune.loading.adapters.base import VISION_LANGUAGE, Adapter
from headprune.loading.adapters.family import Family, TinyModel, register
from headprune.loading.adapters.gemma import VISION
from headprune.loading.adapters.llama import GQA

LLAVA = Adapter(
    family="llava",
    **VISION_LANGUAGE,  # type: ignore[arg-type]
    text_model_types=("llama", "mistral", "qwen2"),
)
register(Family("llava", LLAVA, TinyModel("LlavaConfig", "LlavaForConditionalGeneration", dict(  # 4 image tokens
    text_config=dict(GQA, model_type="llama"), vision_config=dict(VISION, projection_dim=32),
    image_ids=("image_token_index",))), note="a llama, mistral or qwen2 language model; the vision tower kept"))
