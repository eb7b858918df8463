"""Skip the layers an ablation cannot change: replay cached layer inputs of the intact model.

Ablating a head of layer ``l`` changes nothing below ``l``: the hidden states entering layer ``l`` are the
intact model's. During an intact pass, the inputs of some *checkpoint* layers are captured per batch; a
condition whose lowest ablated layer is ``l`` then starts at the nearest checkpoint ``c <= l``: layers
below ``c`` are swapped for a pass-through (the embedding, masks and rotary tables are still computed, which
is cheap) and layer ``c`` receives the cached input. The computation from ``c`` on is the same as a full
pass, so results are identical. Checkpoints are spaced to fit a memory budget, at layers a pass may start at
(``HeadGrid.starts_at``: Gemma 4's key/value-sharing layers read keys and values that an earlier layer computes in
the same pass, so no checkpoint lies beyond that layer; ``Adapter.layer_starts``: GLM-5's shared sparse-attention
layers take the keys the layer before chose, so none lies on them).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from headprune.core.limits import number
from headprune.errors import InternalCheckError
from headprune.loading.models import LoadedModel


def default_budget_mb() -> int:
    """The cache's memory budget: ``HEADPRUNE_LAYER_CACHE_MB`` (0 turns it off), default 2048 MB.

    Raises:
        SettingsError: the variable is not a whole number of MB.
    """
    return int(number("HEADPRUNE_LAYER_CACHE_MB"))


class _PassThrough(nn.Module):
    """Stands in for a skipped layer: returns the hidden states it is given (with no attention weights beside them
    where the family's layers return a pair: ``Adapter.layer_returns_tuple``)."""

    def __init__(self, layer: nn.Module, pair: bool = False) -> None:
        super().__init__()
        # The model's loop may read a layer's own plain settings (ModernBERT picks each layer's mask by its
        # attention_type): the stand-in has them too.
        for name, value in vars(layer).items():
            if not name.startswith("_") and isinstance(value, (str, int, float, bool, type(None))):
                setattr(self, name, value)
        self.pair = pair

    def forward(self, hidden_states: torch.Tensor, *args: object, **kwargs: object
                ) -> torch.Tensor | tuple[torch.Tensor, None]:
        return (hidden_states, None) if self.pair else hidden_states


def _hidden_from(args: tuple, kwargs: dict) -> torch.Tensor:
    return args[0] if args else kwargs["hidden_states"]


def _with_hidden(args: tuple, kwargs: dict, hidden: torch.Tensor) -> tuple[tuple, dict]:
    if args:
        return (hidden, *args[1:]), kwargs
    return args, {**kwargs, "hidden_states": hidden}


class LayerInputCache:
    """Captured inputs of checkpoint layers, keyed by batch index."""

    def __init__(self, lm: LoadedModel, checkpoints: list[int]) -> None:
        self.lm = lm
        adapter = lm.adapter  # (GLM-5's shared sparse-attention layers read the keys an earlier layer chose)
        starts = adapter.layer_starts(adapter.sizes(lm.model.config)) if adapter.layer_starts else None
        self.checkpoints = sorted(c for c in set(checkpoints) if 0 < c < lm.grid.num_layers and lm.grid.starts_at(c)
                                  and (starts is None or starts[c]))
        self._store: dict[int, dict[int, torch.Tensor]] = {}

    @classmethod
    def for_budget(cls, lm: LoadedModel, token_count: int, *, budget_mb: int | None = None) -> LayerInputCache:
        """Checkpoints spaced evenly so that ``token_count`` padded tokens per layer fit ``budget_mb`` (default:
        :func:`default_budget_mb`)."""
        budget_mb = default_budget_mb() if budget_mb is None else budget_mb
        hidden = int(lm.model.config.get_text_config().hidden_size)  # a vision-language model: its text model's
        # A captured input is a copy of the hidden states, in the model's dtype (2 bytes an element in bfloat16).
        element = next((p.element_size() for p in lm.model.parameters() if p.is_floating_point()), 4)
        per_layer = token_count * hidden * element
        grid = lm.grid
        layers = next((c for c in range(1, grid.num_layers) if not grid.starts_at(c)), grid.num_layers)
        count = min(layers - 1, int(budget_mb * 2**20 // max(per_layer, 1)))
        return cls(lm, [math.floor(i * layers / (count + 1)) for i in range(1, count + 1)])

    @property
    def empty(self) -> bool:
        """Nothing captured yet."""
        return not self._store

    def complete(self, batch_count: int) -> bool:
        """Whether every batch's inputs (batches ``0 .. batch_count - 1``) have been captured."""
        return all(self.holds(number) for number in range(batch_count))

    def holds(self, batch_index: int) -> bool:
        """Whether the inputs of every checkpoint are captured for ``batch_index``."""
        return len(self._store.get(batch_index, ())) == len(self.checkpoints)

    def start_for(self, lowest_layer: int) -> int:
        """The checkpoint to start from for an ablation whose lowest layer is ``lowest_layer`` (0: none)."""
        usable = [c for c in self.checkpoints if c <= lowest_layer]
        return usable[-1] if usable else 0

    @contextmanager
    def capture(self, batch_index: int) -> Iterator[None]:
        """Record the inputs of the checkpoint layers during one intact forward pass."""
        with inputs_of(self.lm, self.checkpoints, self._store.setdefault(batch_index, {})):
            yield

    @contextmanager
    def replay(self, batch_index: int, start: int) -> Iterator[None]:
        """Run one forward pass from layer ``start`` on, fed with the cached input of that layer."""
        if start == 0:
            yield
            return
        with starting_at(self.lm, start, self._store[batch_index][start], f"the replay of batch {batch_index}"):
            yield


@contextmanager
def starting_at(lm: LoadedModel, start: int, hidden: torch.Tensor, what: str) -> Iterator[None]:
    """Run one forward pass of ``lm`` from layer ``start`` on, fed with ``hidden`` there: the layers below are
    swapped for a pass-through (``what`` names the pass in the internal error raised when layer ``start`` was not
    fed as expected)."""
    container = lm.adapter.layers_container(lm.model)
    originals = [container[i] for i in range(start)]
    fed: list[tuple[int, ...]] = []  # the shape of what layer `start` was given, per forward pass

    def substitute(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        fed.append(tuple(_hidden_from(args, kwargs).shape))
        return _with_hidden(args, kwargs, hidden)

    handle = container[start].register_forward_pre_hook(substitute, with_kwargs=True)
    try:
        for i in range(start):
            container[i] = _PassThrough(originals[i], lm.adapter.layer_returns_tuple)
        yield
    finally:
        for i, layer in enumerate(originals):
            container[i] = layer
        handle.remove()
    # Checked on a normal exit: the pass must have fed layer `start` (once per pass) with an input of the shape the
    # pass had; otherwise it ran from somewhere else.
    if not fed or any(shape != tuple(hidden.shape) for shape in fed):
        raise InternalCheckError(f"layer cache: {what} should start at layer {start}, but layer {start} was fed "
                                 f"{len(fed)} times (shapes {fed[:2]}, cached {tuple(hidden.shape)})")


@contextmanager
def inputs_of(lm: LoadedModel, layers: list[int], into: dict[int, torch.Tensor]) -> Iterator[None]:
    """Within the block, each forward pass of ``lm`` stores a copy of the input of each of ``layers`` in ``into``."""
    container = lm.adapter.layers(lm.model)
    handles = []
    for c in layers:
        def hook(module: nn.Module, args: tuple, kwargs: dict, c: int = c) -> None:
            into[c] = _hidden_from(args, kwargs).detach().clone()

        handles.append(container[c].register_forward_pre_hook(hook, with_kwargs=True))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
