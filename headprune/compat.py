"""Differences between the transformers releases headprune supports (pyproject's floor to the newest), in one place.

- transformers 5.24 renamed a model's key/value cache from ``past_key_values`` to ``cache``, both as the forward
  pass's keyword and as its output's field; earlier 5.x releases (the floor, 5.17, among them) know only the old name.
- A key/value cache is a list of per-layer caches (``DynamicCache.layers``, a ``DynamicLayer`` each for full
  attention) on every supported release.
- A per-row ``logits_to_keep`` (``(batch, positions)``) is sliced per row only by releases that have
  ``slice_logits_to_keep``; earlier ones index every row with it.
"""

from __future__ import annotations

from functools import lru_cache
from collections.abc import Callable
from typing import Any


@lru_cache(maxsize=1)
def cache_name() -> str:
    """``cache`` on transformers >= 5.24, else ``past_key_values``."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def cache_of(output: Any) -> Any:
    """The key/value cache a forward pass returned."""
    return getattr(output, cache_name())


def passing_cache(cache: Any) -> dict[str, Any]:
    """The forward keyword that hands a model ``cache``: ``model(..., **passing_cache(cache))``."""
    return {cache_name(): cache}


@lru_cache(maxsize=1)
def _slices_rows() -> bool:
    """Whether models take a per-row ``(batch, positions)`` ``logits_to_keep`` (``slice_logits_to_keep``)."""
    from transformers import modeling_utils

    return hasattr(modeling_utils, "slice_logits_to_keep")


def logits_at(positions: Any) -> tuple[Any, Callable[[Any], Any]]:
    """``(logits_to_keep, pick)`` for logits at per-row ``positions`` (``(batch, k)`` integer tensor): pass the first
    to the model and apply ``pick`` to its logits to get ``(batch, k, vocab)``.

    Recent transformers slice each row itself; earlier releases index every row with a 1-D tensor, so they are given
    the positions any row needs (a few more logits) and each row's are picked from those.
    """
    import torch

    if _slices_rows():
        return positions, lambda logits: logits
    union = torch.unique(positions, sorted=True)
    index = torch.searchsorted(union, positions)
    return union, lambda logits: torch.take_along_dim(logits, index[..., None].to(logits.device), dim=1)


def full_layers_of(cache: Any, length: int) -> bool:
    """Whether ``cache`` is a ``DynamicCache`` of plain full-attention layers that each hold ``length`` positions
    (what :func:`with_layers_below` can copy from: no sliding window dropped positions, no layer kind of its own)."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    return type(cache) is DynamicCache and all(
        type(layer) is DynamicLayer and layer.is_initialized and layer.keys.shape[-2] == length
        for layer in cache.layers)


def with_layers_below(cache: Any, source: Any, start: int) -> Any:
    """``cache`` (its layers below ``start`` never filled: a pass that began at layer ``start``) with those layers'
    keys and values taken from ``source`` (see :func:`full_layers_of`); ``source`` is not changed."""
    for index, layer in enumerate(source.layers[:start]):
        cache.update(layer.keys, layer.values, index)
    return cache
