"""Differences between the transformers releases headprune supports (pyproject's floor to the newest), in one place.

- transformers 5.24 renamed a model's key/value cache from ``past_key_values`` to ``cache``, both as the forward
  pass's keyword and as its output's field; earlier 5.x releases (the floor, 5.17, among them) know only the old name.
- A key/value cache is a list of per-layer caches (``DynamicCache.layers``, a ``DynamicLayer`` each for full
  attention) on every supported release.
- A per-row ``logits_to_keep`` (``(batch, positions)``) is sliced per row only by releases that have
  ``slice_logits_to_keep``; earlier ones index every row with it.
- A quantized checkpoint loaded dequantized: 5.25's quantizer forgets how it was loaded (``remove_quantization_config``
  deletes ``_weight_conversions``), so ``save_pretrained`` writes the dequantized weights; 5.17 keeps the conversions
  and re-quantizes on save, with fresh scales (:func:`forget_quantized_loading` does what 5.25 does).
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


def full_length(cache: Any) -> int | None:
    """The positions every layer of ``cache`` holds, when it is a ``DynamicCache`` of plain full-attention layers
    that all hold as many (no sliding window dropped any, no layer kind of its own); else ``None``."""
    from transformers.cache_utils import DynamicCache, DynamicLayer

    if type(cache) is not DynamicCache or not cache.layers:
        return None
    lengths = {layer.keys.shape[-2] if type(layer) is DynamicLayer and layer.is_initialized else None
               for layer in cache.layers}
    return lengths.pop() if len(lengths) == 1 else None


def with_layers_below(cache: Any, source: Any, start: int) -> Any:
    """``cache`` (its layers below ``start`` never filled: a pass that began at layer ``start``) with those layers'
    keys and values taken from ``source`` (see :func:`full_length`); ``source`` is not changed."""
    return appended_below(cache, [(layer.keys, layer.values) for layer in source.layers], start)


def appended_below(cache: Any, keys_values: list[tuple[Any, Any]], start: int) -> Any:
    """``cache`` with each layer below ``start`` given ``keys_values``' positions after its own (a layer not filled
    yet starts with them); the tensors given are not changed."""
    for index, (keys, values) in enumerate(keys_values[:start]):
        cache.update(keys, values, index)
    return cache


def cropped(cache: Any, length: int) -> Any:
    """``cache`` (see :func:`full_length`) cut to its first ``length`` positions, in place."""
    for layer in cache.layers:
        layer.keys, layer.values = layer.keys[..., :length, :], layer.values[..., :length, :]
    return cache


def positions_after(cache: Any, length: int) -> list[tuple[Any, Any]]:
    """Per layer of ``cache`` (see :func:`full_length`), copies of its keys and values after the first
    ``length`` positions."""
    return [(layer.keys[..., length:, :].clone(), layer.values[..., length:, :].clone()) for layer in cache.layers]


def stacked(caches: list[Any], length: int, rows: Any = None) -> Any:
    """One cache whose rows are those of ``caches`` (each plain full layers, see :func:`full_length`), in order,
    every layer right-padded with zeros to ``length`` positions (a mask must hide the padding); of one cache, only
    its ``rows`` (an index tensor) where given."""
    from transformers.cache_utils import DynamicCache

    def part(tensor: Any) -> Any:
        return tensor if rows is None else tensor.index_select(0, rows)

    merged = DynamicCache()
    for index in range(len(caches[0].layers)):
        layers = [cache.layers[index] for cache in caches]
        merged.update(right_padded([part(layer.keys) for layer in layers], length),
                      right_padded([part(layer.values) for layer in layers], length), index)
    return merged


def right_padded(tensors: list[Any], length: int, dim: int = -2) -> Any:
    """``tensors`` one after another along the first axis, each right-padded with zeros to ``length`` along ``dim``
    (not the first), written once into one tensor."""
    first = tensors[0]
    dim %= first.dim()
    shape = [sum(len(tensor) for tensor in tensors), *first.shape[1:]]
    shape[dim] = length
    out = first.new_zeros(shape)
    start = 0
    for tensor in tensors:
        out[start: start + len(tensor)].narrow(dim, 0, tensor.shape[dim]).copy_(tensor)
        start += len(tensor)
    return out


def forget_quantized_loading(model: Any) -> None:
    """After a quantized checkpoint was loaded dequantized: forget the conversions that loaded it, as transformers
    5.25 does, so ``save_pretrained`` writes the weights as they are (5.17 would re-quantize them on save)."""
    if hasattr(model, "_weight_conversions"):
        del model._weight_conversions
