"""Surgery: physically remove heads (sliced) or silence them in place (dense). Validate, then mutate.

The per-layer layouts come from :mod:`headprune.surgery.plan`; the shrunken modules are built by the same
``shrink`` that the exported ``modeling_headprune.py`` runs when a user loads the checkpoint, so the saved
config and the tensor shapes describe each other by construction.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterable, Sequence

import torch
from torch import nn

from headprune.core.record_json import to_json
from headprune.errors import HeadSpecError
from headprune.heads import Head
from headprune.loading.adapters.base import get_path
from headprune.loading.models import LoadedModel
from headprune.surgery.plan import LayerPlan
from headprune.surgery.remote_modeling import head_param, head_projection, qkv_layout, shrink


def _rows(weight: torch.Tensor, blocks: Sequence[int], size: int, dim: int) -> torch.Tensor:
    """Concatenate blocks ``[b * size, (b + 1) * size)`` of ``weight`` along ``dim``."""
    return torch.cat([weight.narrow(dim, b * size, size) for b in blocks], dim=dim)


def _adopt(module: nn.Module, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    """Give a re-created projection its new, smaller weights without another copy (the tensors the module was
    built with are freed)."""
    module.weight = nn.Parameter(weight.detach(), requires_grad=False)
    if bias is not None:
        module.bias = nn.Parameter(bias.detach(), requires_grad=False)


def copy_sharing(model: nn.Module, *, edited: Iterable[torch.Tensor] = ()) -> nn.Module:
    """A copy of ``model``'s modules whose parameters and buffers are ``model``'s own tensors (no memory), except
    ``edited``, which are real copies because the caller changes them in place.

    An export holds the original (to verify against) and the pruned model at once: copying every tensor would
    double the weights in memory before anything is written. Only the tensors surgery touches are new.
    """
    fresh = {id(tensor) for tensor in edited}
    memo = {id(t): t for t in itertools.chain(model.parameters(), model.buffers()) if id(t) not in fresh}
    return copy.deepcopy(model, memo)


def count_parameters(model: nn.Module) -> int:
    """Parameters, each shared tensor counted once (tied embeddings)."""
    seen, total = set(), 0
    for parameter in model.parameters():
        if parameter.data_ptr() not in seen:
            seen.add(parameter.data_ptr())
            total += parameter.numel()
    return total


def slice_model(lm: LoadedModel, plans: Sequence[LayerPlan], removed: Sequence[Head], *,
                means: torch.Tensor | None = None) -> nn.Module:
    """A physically pruned copy of ``lm.model``; its ``config.headprune`` records the shapes to rebuild it.

    Args:
        lm: the model (left untouched).
        plans: per-layer layouts (:func:`headprune.surgery.plan.plan_layers` for ``removed``).
        removed: the heads removed (recorded in the config).
        means: for mean ablation, ``(layers, heads, head_dim)`` means folded into the output bias.

    Raises:
        HeadSpecError: mean ablation on a projection without bias.
    """
    adapter, hd = lm.adapter, lm.grid.head_dim
    if means is not None:
        _check_bias_for_mean(lm)
    layers = [{k: v for k, v in to_json(p).items() if k != "layer"} for p in plans]
    record = {"paths": adapter.module_paths(), "head_dim": hd, "layers": layers,
              "removed": [str(h) for h in sorted(removed)], "base_class": type(lm.model).__name__,
              "original_heads": lm.grid.num_heads, "original_kv_heads": lm.grid.num_kv_heads}
    # Validate done; now build the new weights from the original, then shrink a copy and give them to it.
    originals = adapter.layers(lm.model)
    new_weights = [{} if p.layout == "unchanged" else _sliced_weights(lm, originals[p.layer], p, means)
                   for p in plans]
    model = copy_sharing(lm.model)
    shrink(model, record)  # unchanged layers keep their modules, which hold the original's own tensors
    for layer, weights in zip(adapter.layers(model), new_weights):
        for path, (weight, bias) in weights.items():
            if isinstance(get_path(layer, path), nn.Parameter):  # a head's row of sinks or norm weights
                parent, _, name = path.rpartition(".")
                setattr(get_path(layer, parent), name, nn.Parameter(weight.detach(), requires_grad=False))
            else:
                _adopt(get_path(layer, path), weight, bias)
    model.config.headprune = record
    return model


def _check_bias_for_mean(lm: LoadedModel) -> None:
    if lm.adapter.output_projection(lm.model, 0).bias is None:
        raise HeadSpecError(f"mean ablation cannot be exported exactly: the {lm.adapter.family} attention output "
                            "projection has no bias to fold the mean into (use --ablation zero)")


def _sliced_weights(lm: LoadedModel, layer: nn.Module, plan: LayerPlan, means: torch.Tensor | None) -> dict:
    adapter, hd, grid = lm.adapter, lm.grid.head_dim, lm.grid
    out: dict = {}
    layout = qkv_layout(adapter.qkv_layout)
    for part, path in enumerate(adapter.qkv_paths):
        module = get_path(layer, path)
        blocks = layout.blocks(part, list(plan.q_heads), list(plan.kv_heads), grid.num_heads, grid.num_kv_heads)
        size = layout.size(hd)
        bias = None if module.bias is None else _rows(module.bias, blocks, size, 0)
        out[path] = (_rows(module.weight, blocks, size, layout.dim), bias)
    for path, which in adapter.head_projections:
        module = head_projection(layer, path)
        if module is not None:  # head_dim output rows a head, as q/k/v
            blocks = plan.q_heads if which == "q" else plan.kv_heads
            bias = None if module.bias is None else _rows(module.bias, blocks, hd, 0)
            out[path] = (_rows(module.weight, blocks, hd, 0), bias)
    for path, which in adapter.head_params:
        parameter = head_param(layer, path)
        if parameter is not None:  # rows per head: (heads, ...) -> (kept heads, ...)
            heads = plan.q_heads if which == "q" else plan.kv_heads
            out[path] = (parameter.detach()[list(heads)].clone(), None)
    projection = get_path(layer, adapter.output_projection_path)
    conv = adapter.projection_is_conv1d  # GPT-2's Conv1D weight is (in, out): heads are rows
    weight = _rows(projection.weight, plan.q_heads, hd, 0 if conv else 1).clone()
    for slot, head in enumerate(plan.q_heads):
        if head in plan.zeroed:
            (weight[slot * hd:(slot + 1) * hd] if conv else weight[:, slot * hd:(slot + 1) * hd]).zero_()
    bias = None if projection.bias is None else projection.bias.detach().clone()
    if means is not None:
        kept_live = set(plan.q_heads) - set(plan.zeroed)
        for head in range(grid.num_heads):
            if head not in kept_live:
                columns = projection.weight[head * hd:(head + 1) * hd].T if conv else \
                    projection.weight[:, head * hd:(head + 1) * hd]
                bias = bias + columns @ means[plan.layer, head].to(columns.dtype)
    out[adapter.output_projection_path] = (weight, bias)
    return out


def densify(lm: LoadedModel, heads: Sequence[Head], *, means: torch.Tensor | None = None) -> nn.Module:
    """A copy of ``lm.model`` with the heads' output-projection inputs zeroed (mean folded into the bias)."""
    checked = lm.grid.check(heads)
    if means is not None:
        _check_bias_for_mean(lm)
    projections = [lm.adapter.output_projection(lm.model, layer) for layer in sorted({h.layer for h in checked})]
    model = copy_sharing(lm.model, edited=[t for p in projections for t in (p.weight, p.bias) if t is not None])
    hd = lm.grid.head_dim
    with torch.no_grad():
        for head in checked:
            projection = lm.adapter.output_projection(model, head.layer)
            cols = slice(head.head * hd, (head.head + 1) * hd)
            conv = lm.adapter.projection_is_conv1d
            block = projection.weight[cols] if conv else projection.weight[:, cols]
            if means is not None:
                projection.bias += (block.T if conv else block) @ means[head.layer, head.head].to(block.dtype)
            block.zero_()
    return model
