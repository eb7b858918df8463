"""The registry of architecture adapters, keyed by ``config.model_type``.

Adding a family is one small file declaring an :class:`Adapter` and one line in ``_ADAPTERS``.
"""

from __future__ import annotations

from transformers import PretrainedConfig

from headprune.core.registry import Registry
from headprune.errors import UnsupportedModelError
from headprune.loading.adapters.base import Adapter
from headprune.loading.adapters.bert import BERT
from headprune.loading.adapters.cohere import COHERE
from headprune.loading.adapters.deberta import DEBERTA
from headprune.loading.adapters.gemma3 import GEMMA3
from headprune.loading.adapters.gpt2 import GPT2
from headprune.loading.adapters.gpt_oss import GPT_OSS
from headprune.loading.adapters.llama import LLAMA
from headprune.loading.adapters.llava import LLAVA
from headprune.loading.adapters.modernbert import MODERNBERT
from headprune.loading.adapters.moe import MOE
from headprune.loading.adapters.neox import NEOX
from headprune.loading.adapters.olmo2 import OLMO2
from headprune.loading.adapters.phi3 import PHI3
from headprune.loading.adapters.qwen2_vl import QWEN2_VL
from headprune.loading.adapters.unsupported import refusal, text_family_refusal

_ADAPTERS: tuple[Adapter, ...] = (LLAMA, GEMMA3, LLAVA, QWEN2_VL, MOE, GPT_OSS, PHI3, COHERE, OLMO2, GPT2, NEOX, BERT,
                                 DEBERTA, MODERNBERT)
_BY_MODEL_TYPE: Registry[str, Adapter] = Registry("model type")  # two adapters claiming one type: an error
for _adapter in _ADAPTERS:
    for _model_type in _adapter.model_types:
        _BY_MODEL_TYPE.add(_model_type, _adapter)


def supported_model_types() -> list[str]:
    """Every ``model_type`` headprune can work on, sorted."""
    return sorted(_BY_MODEL_TYPE)


def adapter_for(config: PretrainedConfig) -> Adapter:
    """The adapter for a config, or :class:`UnsupportedModelError` saying why where that is known (and, for a
    vision-language checkpoint, whether its language model is supported) and naming the supported families."""
    model_type = getattr(config, "model_type", None)
    adapter = _BY_MODEL_TYPE.get(model_type or "")
    if adapter is None:
        whole = sorted(t for a in _ADAPTERS if a.text_config for t in a.model_types)
        raise UnsupportedModelError(refusal(config, supported_model_types(), lambda t: t in _BY_MODEL_TYPE, whole))
    text = getattr(config, adapter.text_config, None) if adapter.text_config else None
    if adapter.text_model_types and text is not None and getattr(text, "model_type", None) not in \
            adapter.text_model_types:  # a vision-language wrapper around a language model it does not take
        raise UnsupportedModelError(text_family_refusal(config, adapter.text_model_types,
                                                        lambda t: t in _BY_MODEL_TYPE))
    return adapter


__all__ = ["Adapter", "adapter_for", "supported_model_types"]
