"""Gemma 3 as shipped (``Gemma3ForConditionalGeneration``, model type ``gemma3``): the language model's heads,
``model.language_model.layers[i].self_attn.{q,k,v,o}_proj`` as in Gemma 3's text model, sized by
``config.text_config``. The vision tower and the projector into the language model are never touched, so the
pruned checkpoint still reads images.
"""

from headprune.loading.adapters.base import VISION_LANGUAGE, Adapter

GEMMA3 = Adapter(
    family="gemma3",
    model_types=("gemma3",),
    **VISION_LANGUAGE,  # type: ignore[arg-type]
)
