"""The registry of model families, keyed by ``config.model_type``.

Each module of this folder is a family file: it declares where its heads live (an :class:`Adapter`) and registers
a :class:`~headprune.loading.adapters.family.Family` for each model type it serves. Every module here is imported
below, so adding a family is adding its file; nothing else names it.
"""

from __future__ import annotations

import importlib
import pkgutil

from packaging.version import Version
from transformers import PretrainedConfig

from headprune.errors import UnsupportedModelError
from headprune.loading.adapters.base import Adapter
from headprune.loading.adapters.family import FAMILIES, Family
from headprune.loading.adapters.unsupported import refusal, text_family_refusal

# The helpers of family files, which register nothing.
_NOT_FAMILIES = {"base", "family", "gguf_spec", "unsupported"}
for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module not in _NOT_FAMILIES:
        importlib.import_module(f"{__name__}.{_module}")


def supported_model_types() -> list[str]:
    """Every ``model_type`` headprune can work on, sorted."""
    return sorted(FAMILIES)


def family_of(model_type: str) -> Family | None:
    """The registered family of ``model_type`` (None: not supported)."""
    return FAMILIES.get(model_type)


def adapter_for(config: PretrainedConfig) -> Adapter:
    """The adapter for a config, or :class:`UnsupportedModelError` saying why where that is known (and, for a
    vision-language checkpoint, whether its language model is supported) and naming the supported families."""
    model_type = getattr(config, "model_type", None)
    family = FAMILIES.get(model_type or "")
    if family is None:
        whole = sorted(f.model_type for f in FAMILIES.values() if f.adapter.text_config)
        raise UnsupportedModelError(refusal(config, supported_model_types(), lambda t: t in FAMILIES, whole))
    adapter = family.adapter
    text = getattr(config, adapter.text_config, None) if adapter.text_config else None
    if adapter.text_model_types and text is not None and getattr(text, "model_type", None) not in \
            adapter.text_model_types:  # a vision-language wrapper around a language model it does not take
        raise UnsupportedModelError(text_family_refusal(config, adapter.text_model_types, lambda t: t in FAMILIES))
    return adapter.text_adapters.get(getattr(text, "model_type", None) or "", adapter)


def check_generates(config: PretrainedConfig | None) -> None:
    """Refuse generating with a model type whose own ``generate`` fails inside the installed transformers
    (``Family.generates_from``), before any work.

    Raises:
        UnsupportedModelError: the installed transformers is older than the family's ``generates_from``.
    """
    family = FAMILIES.get(getattr(config, "model_type", None) or "")
    if family is None or not family.generates_from:
        return
    least, why = family.generates_from
    from transformers import __version__ as installed  # (the module loaded now)

    if Version(installed) < Version(least):
        raise UnsupportedModelError(
            f"{family.model_type}: generating needs transformers >= {least} (the installed {installed}"
            f" {why}): pip install -U 'transformers>={least}'; choice and text tasks run on this version")


__all__ = ["Adapter", "FAMILIES", "Family", "adapter_for", "check_generates", "family_of", "supported_model_types"]
