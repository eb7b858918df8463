"""Ablating attention heads: a forward pre-hook on the attention output projection.

The projection's input is the concatenation of the query heads' outputs, ``(B, T, num_heads * head_dim)``;
head ``h`` is the slice ``[h * head_dim, (h + 1) * head_dim)`` (``out_dim`` wide, in general: each layer's own,
:class:`~headprune.heads.LayerHeads`). Zeroing that slice is exactly what removing
the head does (its output never reaches the residual stream); ``mean`` ablation replaces the slice by the
head's mean output over reference inputs instead. Key/value heads are untouched.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Literal

import torch
from torch import nn

from headprune.core.choices import ABLATIONS
from headprune.errors import HeadSpecError, InternalCheckError
from headprune.heads import Head
from headprune.loading.models import LoadedModel

AblationMode = Literal["zero", "mean"]
ABLATION_MODES: tuple[str, ...] = ABLATIONS


class FiredHooks:
    """Counts, during one ``ablated`` block, the model's forward passes and how often each targeted layer's
    hook ran: every pass must run every targeted hook once, or the heads were not (all) ablated."""

    def __init__(self, layers: Iterable[int]) -> None:
        self.forwards = 0
        self.calls = {layer: 0 for layer in layers}

    def check(self, heads: Iterable[Head]) -> None:
        """Raises: InternalCheckError naming the first layer whose hook did not run on every forward pass."""
        if not self.forwards:
            return  # no forward pass in the block: nothing was measured
        for layer, calls in sorted(self.calls.items()):
            if calls != self.forwards:
                named = ",".join(str(h) for h in heads if h.layer == layer)
                raise InternalCheckError(f"the ablation hook of layer {layer} ({named}) ran {calls} times in "
                                         f"{self.forwards} forward passes: those heads were not ablated on every "
                                         "pass, so the result would be wrong")


def _make_pre_hook(indices: list[int], width: int, replacement: torch.Tensor | None,  # noqa: ANN202
                   fired: FiredHooks, layer: int):
    index = torch.tensor(indices)

    def hook(module: nn.Module, args: tuple) -> tuple:
        fired.calls[layer] += 1
        hidden = args[0].clone()  # (B, T, H * width); cloned so the caller's tensor is never changed
        per_head = hidden.view(*hidden.shape[:-1], -1, width)  # (B, T, H, width), a view of `hidden`
        where = index.to(hidden.device)
        if replacement is None:
            per_head[..., where, :] = 0
        else:  # (len(index), width), broadcast
            per_head[..., where, :] = replacement.to(device=per_head.device, dtype=per_head.dtype)
        return (hidden, *args[1:])

    return hook


@contextmanager
def ablated(
    lm: LoadedModel,
    heads: Iterable[Head],
    *,
    mode: AblationMode = "zero",
    means: torch.Tensor | None = None,
) -> Iterator[FiredHooks]:
    """Ablate ``heads`` for the duration of the ``with`` block; when it ends normally, check that every
    forward pass of the model in it ran the hook of every targeted layer (two integer counters per pass).

    Args:
        lm: the model.
        heads: heads to ablate; checked against the model's grid first.
        mode: ``zero`` or ``mean``.
        means: for ``mean``, the per-head mean outputs, ``(num_layers, heads, out_dim)`` (the widest layer's, the
            rest padded: see :func:`collect_head_means`).

    Raises:
        HeadSpecError: a head is out of range, or ``mean`` without means.
        InternalCheckError: a targeted layer's hook did not run on every forward pass (names the layer).
    """
    checked = lm.grid.check(heads)
    if mode not in ABLATION_MODES:
        raise HeadSpecError(f"unknown ablation {mode!r}; choose one of {', '.join(ABLATION_MODES)}")
    if mode == "mean" and means is None:
        raise HeadSpecError("mean ablation needs the heads' mean outputs (collect_head_means)")
    by_layer: dict[int, list[int]] = {}
    for head in checked:
        by_layer.setdefault(head.layer, []).append(head.head)
    handles = []
    fired = FiredHooks(by_layer)
    try:
        if by_layer:
            def count(module: nn.Module, args: tuple) -> None:
                fired.forwards += 1

            handles.append(lm.model.register_forward_pre_hook(count))
        for layer, indices in by_layer.items():
            width = lm.grid.layers[layer].out_dim
            replacement = means[layer, indices, :width] if mode == "mean" else None
            projection = lm.adapter.output_projection(lm.model, layer)
            handles.append(projection.register_forward_pre_hook(
                _make_pre_hook(indices, width, replacement, fired, layer)))
        yield fired
        fired.check(checked)
    finally:
        for handle in handles:
            handle.remove()


def means_digest(means: torch.Tensor) -> str:
    """A content hash of head means (their float32 bytes): export checks it to use exactly find's means."""
    import hashlib

    data = means.detach().to(device="cpu", dtype=torch.float32).contiguous().numpy().tobytes()
    return "sha256:" + hashlib.sha256(data).hexdigest()


@torch.no_grad()
def collect_head_means(
    lm: LoadedModel, batches: Iterable[tuple[torch.Tensor, torch.Tensor, dict]]
) -> torch.Tensor:
    """Mean output of every head over the real (non-padding) tokens of reference inputs.

    Args:
        lm: the intact model.
        batches: ``(input_ids, attention_mask, extra_forward_kwargs)`` triples.

    Returns:
        ``(num_layers, heads, out_dim)`` float32 tensor, the widest layer's sizes (:attr:`HeadGrid.widest`): a layer
        with fewer or narrower heads fills its corner, the rest is zero.
    """
    grid = lm.grid
    sums = torch.zeros(grid.num_layers, *grid.widest, dtype=torch.float64)
    count = torch.zeros((), dtype=torch.float64)
    current_mask: list[torch.Tensor] = []

    def collector(layer: int):  # noqa: ANN202
        heads, width = grid.layers[layer].heads, grid.layers[layer].out_dim

        def hook(module: nn.Module, args: tuple) -> None:
            per_head = args[0].view(*args[0].shape[:-1], heads, width).to(torch.float64)
            mask = current_mask[0].to(device=per_head.device, dtype=torch.float64)  # (B, T)
            sums[layer, :heads, :width] += torch.einsum("bt,bthd->hd", mask, per_head).cpu()

        return hook

    handles = [
        lm.adapter.output_projection(lm.model, layer).register_forward_pre_hook(collector(layer))
        for layer in range(grid.num_layers) if grid.layers[layer].heads
    ]
    try:
        for input_ids, attention_mask, extra in batches:
            current_mask[:] = [attention_mask]
            lm.model(input_ids=input_ids, attention_mask=attention_mask, **extra)
            count += attention_mask.sum().cpu()
    finally:
        for handle in handles:
            handle.remove()
    if count == 0:
        raise HeadSpecError("cannot compute head means: the reference inputs have no tokens")
    return (sums / count).to(torch.float32)
