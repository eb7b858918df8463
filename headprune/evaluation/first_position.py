"""A sequence classifier that reads only the first position: its last layer runs there alone after attention.

BERT's and RoBERTa's sequence classifiers read the last layer's output at the first position (``[CLS]``, ``<s>``)
and nowhere else. That layer's keys and values need every position, but what follows its attention (the output
projection, the residual and its norm, the feed-forward block) is position-wise: run at the first position alone, it
gives that position what a full pass gives, up to float rounding, for about a quarter of the layer's work. An
ablation whose lowest layer is the last one then costs little more than its attention, and every other ablation a
layer's work less (``headprune.evaluation.layer_reuse`` skips the layers below it).

Which models qualify is declared by their adapter (``Adapter.first_position_classes``: transformers' own classes,
named); the module cut is the parent of the attention output projection, which is given the attention's output and
the layer's input.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn

from headprune.loading.adapters.base import get_path
from headprune.loading.models import LoadedModel


class _FirstPosition(nn.Module):
    """Runs ``inner`` on the first position of each ``(B, T, ...)`` tensor it is given: returns ``(B, 1, ...)``."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: object, **kwargs: object) -> object:
        def first(value: object) -> object:
            return value[:, :1] if isinstance(value, torch.Tensor) and value.dim() >= 3 else value

        return self.inner(*(first(a) for a in args), **{k: first(v) for k, v in kwargs.items()})


def reads_first_position(lm: LoadedModel) -> bool:
    """Whether ``lm``'s output reads its last layer at the first position alone (see the module docstring)."""
    model = lm.model
    return (isinstance(model, nn.Module) and type(model).__module__.startswith("transformers.")
            and type(model).__name__ in lm.adapter.first_position_classes)


@contextmanager
def last_layer_at_first_position(lm: LoadedModel) -> Iterator[None]:
    """Within the block, ``lm``'s last layer computes what follows its attention at the first position only (the
    last hidden state is ``(B, 1, D)``); nothing changes for a model that does not :func:`reads_first_position`."""
    if not reads_first_position(lm):
        yield
        return
    owner_path = lm.adapter.output_projection_path.rpartition(".")[0]
    parent_path, _, attribute = owner_path.rpartition(".")
    layer = lm.adapter.layers(lm.model)[-1]
    parent = get_path(layer, parent_path) if parent_path else layer
    original = getattr(parent, attribute)
    setattr(parent, attribute, _FirstPosition(original))
    try:
        yield
    finally:
        setattr(parent, attribute, original)
