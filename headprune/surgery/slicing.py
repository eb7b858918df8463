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
        means: for mean ablation, ``(layers, heads, out_dim)`` means folded into the output bias.

    Raises:
        HeadSpecError: mean ablation on a projection without bias.
    """
    adapter = lm.adapter
    if means is not None:
        _check_bias_for_mean(lm, removed)
    record = _record(lm, plans, removed)
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


def _record(lm: LoadedModel, plans: Sequence[LayerPlan], removed: Sequence[Head]) -> dict:
    """The ``config.headprune`` record: the paths and each layer's plan, and each layer's original heads (``grid``)
    where the layers differ; otherwise, as every record before them, one count and size for all."""
    grid = lm.grid
    first = next((layer for layer in grid.layers if layer.heads), grid.layers[0])
    layers = [{k: v for k, v in to_json(p).items() if k != "layer"} for p in plans]
    return {"paths": lm.adapter.module_paths(), "head_dim": first.head_dim, "layers": layers,
            "removed": [str(h) for h in sorted(removed)], "base_class": type(lm.model).__name__,
            "original_heads": first.heads, "original_kv_heads": first.kv_heads,
            **({} if grid.is_uniform else {"grid": to_json(grid.layers)})}


def _check_bias_for_mean(lm: LoadedModel, heads: Sequence[Head]) -> None:
    for layer in sorted({h.layer for h in heads}):
        if lm.adapter.output_projection(lm.model, layer).bias is None:
            raise HeadSpecError(f"mean ablation cannot be exported exactly: the {lm.adapter.family} attention output "
                                "projection has no bias to fold the mean into (use --ablation zero)")


def _sliced_weights(lm: LoadedModel, layer: nn.Module, plan: LayerPlan, means: torch.Tensor | None) -> dict:
    shape = lm.grid.layers[plan.layer]
    mixer = lm.adapter.mixer(shape.kind)
    hd, width = shape.head_dim, shape.out_dim
    out: dict = {}
    layout = qkv_layout(mixer.qkv_layout)
    for part, path in enumerate(mixer.qkv_paths):
        module = head_projection(layer, path)
        if module is None:  # a layer without it (Gemma 4's: no v_proj where keys are values, no k/v where shared;
            # MLA's q_proj beside a query latent)
            continue
        rows = torch.tensor(layout.rows(part, list(plan.q_heads), list(plan.kv_heads), shape,
                                        module.weight.shape[layout.dim]), device=module.weight.device)
        bias = None if module.bias is None else module.bias.index_select(0, rows)
        out[path] = (module.weight.index_select(layout.dim, rows), bias)
    for path, which in mixer.head_projections:
        module = head_projection(layer, path)
        if module is not None:  # head_dim output rows a head, as q/k/v
            blocks = plan.q_heads if which == "q" else plan.kv_heads
            bias = None if module.bias is None else _rows(module.bias, blocks, hd, 0)
            out[path] = (_rows(module.weight, blocks, hd, 0), bias)
    for path, which in mixer.head_params:
        parameter = head_param(layer, path)
        if parameter is not None:  # rows per head: (heads, ...) -> (kept heads, ...)
            heads = plan.q_heads if which == "q" else plan.kv_heads
            out[path] = (parameter.detach()[list(heads)].clone(), None)
    projection = get_path(layer, mixer.output_projection_path)
    conv = mixer.projection_is_conv1d  # GPT-2's Conv1D weight is (in, out): heads are rows
    weight = _rows(projection.weight, plan.q_heads, width, 0 if conv else 1).clone()
    for slot, head in enumerate(plan.q_heads):
        if head in plan.zeroed:
            (weight[slot * width:(slot + 1) * width] if conv else weight[:, slot * width:(slot + 1) * width]).zero_()
    bias = None if projection.bias is None else projection.bias.detach().clone()
    if means is not None:
        kept_live = set(plan.q_heads) - set(plan.zeroed)
        for head in range(shape.heads):
            if head not in kept_live:
                columns = projection.weight[head * width:(head + 1) * width].T if conv else \
                    projection.weight[:, head * width:(head + 1) * width]
                bias = bias + columns @ means[plan.layer, head, :width].to(columns.dtype)
    out[mixer.output_projection_path] = (weight, bias)
    return out


def densify(lm: LoadedModel, heads: Sequence[Head], *, means: torch.Tensor | None = None) -> nn.Module:
    """A copy of ``lm.model`` with the heads' output-projection inputs zeroed (mean folded into the bias)."""
    checked = lm.grid.check(heads)
    if means is not None:
        _check_bias_for_mean(lm, checked)
    projections = [lm.adapter.output_projection(lm.model, layer) for layer in sorted({h.layer for h in checked})]
    model = copy_sharing(lm.model, edited=[t for p in projections for t in (p.weight, p.bias) if t is not None])
    with torch.no_grad():
        for head in checked:
            width = lm.grid.layers[head.layer].out_dim
            projection = lm.adapter.output_projection(model, head.layer)
            cols = slice(head.head * width, (head.head + 1) * width)
            conv = lm.adapter.layer_mixer(model, head.layer).projection_is_conv1d
            block = projection.weight[cols] if conv else projection.weight[:, cols]
            if means is not None:
                projection.bias += (block.T if conv else block) @ means[head.layer, head.head, :width].to(block.dtype)
            block.zero_()
    return model
