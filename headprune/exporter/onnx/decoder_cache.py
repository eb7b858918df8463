"""A decoder's cache as the flat tensors of an ONNX graph: each attention layer's keys and values, and each recurrent
layer's states (a hybrid's convolution or Mamba2 layers), in the names and shapes ONNX Runtime GenAI's model builder
gives them.

A recurrent layer (its transformers cache layer keeps ``conv_states``) takes ``past.{i}.conv``, its convolution's last
``kernel - 1`` inputs ``(batch, channels, kernel - 1)``, and where it has one ``past.{i}.recurrent``, its scan's state
(a Mamba2 layer's ``(batch, heads, head_dim, state)``), and gives ``present.{i}.conv`` / ``present.{i}.recurrent``;
GenAI starts them at zeros and feeds each step's present back as the next step's past. Transformers keeps ``kernel``
inputs of a convolution, whose first the convolution's window never reaches: the graph takes GenAI's ``kernel - 1``
and puts a zero before them. The graph is traced through transformers' own cache layers, given these states as the
step continues from, so the states a step gives back are the model's own.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from headprune.core.compat import cache_of, passing_cache

KEY, VALUE, CONV, RECURRENT = "key", "value", "conv", "recurrent"


def layer_states(model: nn.Module) -> list[dict[str, tuple[int, ...]]]:
    """Each layer's cache, read from one forward pass (a sliced model's layers may keep different head counts):
    ``{"key": (heads, head_dim), "value": (heads, head_dim)}`` for an attention layer, ``{"conv": (channels,
    kernel - 1)}`` and, where it keeps one, ``"recurrent": its state's shape`` for a recurrent layer (without the
    batch); ``{}`` for a layer that keeps nothing (Gemma 4's key/value-sharing layers read their source's)."""
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([[1, 2]]), use_cache=True)
    states = []
    for layer in cache_of(out).layers:
        conv = (getattr(layer, "conv_states", None) or {}).get(0)
        if conv is None:
            states.append({} if layer.keys is None else {KEY: (int(layer.keys.shape[1]), int(layer.keys.shape[3])),
                                                         VALUE: (int(layer.values.shape[1]), int(layer.values.shape[3]))})
            continue
        entry = {CONV: (int(conv.shape[1]), int(conv.shape[2]) - 1)}
        recurrent = layer.recurrent_states.get(0)
        if recurrent is not None:
            entry[RECURRENT] = tuple(int(n) for n in recurrent.shape[1:])
        states.append(entry)
    return states


def _hold(layer: Any, conv: torch.Tensor, recurrent: torch.Tensor | None) -> None:
    """A transformers recurrent cache layer holding GenAI's states as those a step continues from."""
    state = torch.nn.functional.pad(conv, (1, 0))  # the input the window never reaches
    layer.dtype, layer.device = state.dtype, state.device
    layer.conv_states[0], layer.conv_kernel_size[0] = state, int(state.shape[-1])
    layer.is_conv_states_initialized[0] = layer.has_previous_state[0] = True
    if recurrent is not None:  # a copy: the layer updates its state in place, and a graph's input stays as given
        layer.recurrent_states[0], layer.is_recurrent_states_initialized[0] = recurrent.clone(), True


def _gives(layer: Any, names: list[str]) -> list[torch.Tensor]:
    """A layer's present tensors after the step, in the order of its past ones."""
    given = {KEY: lambda: layer.keys, VALUE: lambda: layer.values, CONV: lambda: layer.conv_states[0][..., 1:],
             RECURRENT: lambda: layer.recurrent_states[0]}
    return [given[name]() for name in names]


class FlatCache(nn.Module):
    """The model's forward with its cache as flat tensors, each layer's in the order of :func:`layer_states`:
    ``(ids, mask, positions, k0, v0, k1, ...)`` -> ``(logits, k0', v0', ...)`` (a recurrent layer's ``conv`` and
    ``recurrent`` in place of keys and values); ``combined``: each layer's keys and values stacked in one tensor,
    ``(ids, mask, positions, kv0, kv1, ...)`` -> ``(logits, kv0', kv1', ...)``."""

    def __init__(self, model: nn.Module, states: list[dict[str, tuple[int, ...]]], combined: bool = False) -> None:
        super().__init__()
        self.model, self.combined = model, combined
        self.names = [list(entry) for entry in states]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                *past: torch.Tensor) -> tuple[torch.Tensor, ...]:
        from transformers import DynamicCache

        # Full layers whatever the config says: a sliding-window layer (Mistral's) keeps only its last window - 1
        # positions, so its present tensors would stop growing, which a runtime feeding them back as the next
        # step's past (GenAI) does not expect. The window is applied by the attention mask the model builds from
        # its config either way, so the logits are the same. A model with recurrent layers takes the cache its
        # config builds (those layers keep states, not keys and values).
        recurrent = any(CONV in names for names in self.names)
        cache = DynamicCache(config=self.model.config) if recurrent else DynamicCache()
        given = iter(past)
        for index, names in enumerate(self.names):
            if not names:  # (a layer keeping nothing)
                continue
            if self.combined:
                stacked = next(given)
                cache.update(stacked[0], stacked[1], index)
            elif CONV in names:
                _hold(cache.layers[index], next(given), next(given) if RECURRENT in names else None)
            else:
                cache.update(next(given), next(given), index)
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         **passing_cache(cache), use_cache=True)
        cached = cache_of(out).layers  # (by index: a cache built without the config ends at the last layer updated)
        layers = [(cached[index], names) for index, names in enumerate(self.names) if names]
        if self.combined:
            return (out.logits, *(torch.stack((layer.keys, layer.values)) for layer, _ in layers))
        return (out.logits, *(t for layer, names in layers for t in _gives(layer, names)))
