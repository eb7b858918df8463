"""Surgery: physically remove heads (sliced) or silence them in place (dense). Validate, then mutate.

Sliced layout, per layer, for grouped-query attention (design decision 4): a KV head whose query heads are
all removed goes too. If the remaining query heads still split evenly over the remaining KV heads, that is
the layout (``grouped``). Otherwise two exact layouts exist and the smaller is chosen:
``duplicate-kv`` gives every kept query head its own copy of its KV head; ``keep-zeroed`` keeps some
removed query heads (output columns zeroed) so that every KV group has the same count.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from headprune.errors import HeadSpecError
from headprune.exporter.remote_modeling import _get, shrink
from headprune.heads import Head
from headprune.models import LoadedModel


@dataclass(frozen=True)
class LayerPlan:
    layer: int
    q_heads: tuple[int, ...]  # original query heads kept, in slot order
    kv_heads: tuple[int, ...]  # original KV head behind each KV slot
    zeroed: tuple[int, ...]  # kept query heads whose output is zeroed (keep-zeroed layout)
    layout: str  # "unchanged", "grouped", "duplicate-kv", "keep-zeroed"

    def to_dict(self) -> dict:
        return {"q_heads": list(self.q_heads), "kv_heads": list(self.kv_heads), "zeroed": list(self.zeroed),
                "layout": self.layout}


def plan_layers(lm: LoadedModel, heads: Sequence[Head]) -> list[LayerPlan]:
    """The per-layer sliced layout for removing ``heads``.

    Raises:
        HeadSpecError: a head is out of range, or every head of a layer would go.
    """
    grid = lm.grid
    removed = lm.grid.check(heads)
    group = grid.num_heads // grid.num_kv_heads
    plans = []
    for layer in range(grid.num_layers):
        gone = {h.head for h in removed if h.layer == layer}
        if len(gone) == grid.num_heads:
            raise HeadSpecError(f"cannot remove every head of layer {layer} ({grid.num_heads} heads)")
        kept = [h for h in range(grid.num_heads) if h not in gone]
        if not gone:
            plans.append(LayerPlan(layer, tuple(kept), tuple(range(grid.num_kv_heads)), (), "unchanged"))
            continue
        by_kv = {kv: [h for h in kept if h // group == kv] for kv in range(grid.num_kv_heads)}
        by_kv = {kv: qs for kv, qs in by_kv.items() if qs}
        counts = {len(qs) for qs in by_kv.values()}
        if len(counts) == 1:
            per = counts.pop()
            plans.append(LayerPlan(layer, tuple(q for qs in by_kv.values() for q in qs),
                                   tuple(by_kv), (), "grouped"))
            assert len(plans[-1].q_heads) == per * len(by_kv)
            continue
        widest = max(len(qs) for qs in by_kv.values())
        # Parameter cost beyond the grouped ideal: duplicate-kv adds k and v rows, keep-zeroed adds q rows
        # and output columns; both add head_dim * hidden per head, so compare head counts.
        extra_duplicate = 2 * (len(kept) - len(by_kv))
        extra_zeroed = 2 * (widest * len(by_kv) - len(kept))
        if extra_duplicate < extra_zeroed:
            plans.append(LayerPlan(layer, tuple(kept), tuple(h // group for h in kept), (), "duplicate-kv"))
        else:
            q_heads, zeroed = [], []
            for kv, qs in by_kv.items():
                padding = [h for h in range(kv * group, (kv + 1) * group) if h not in qs][: widest - len(qs)]
                q_heads += sorted(qs + padding)
                zeroed += padding
            plans.append(LayerPlan(layer, tuple(q_heads), tuple(by_kv), tuple(sorted(zeroed)), "keep-zeroed"))
    return plans


def _rows(weight: torch.Tensor, blocks: Sequence[int], size: int, dim: int) -> torch.Tensor:
    """Concatenate blocks ``[b * size, (b + 1) * size)`` of ``weight`` along ``dim``."""
    return torch.cat([weight.narrow(dim, b * size, size) for b in blocks], dim=dim)


def _copy_into(module: nn.Module, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    with torch.no_grad():
        module.weight.copy_(weight)
        if bias is not None:
            module.bias.copy_(bias)


def slice_model(lm: LoadedModel, heads: Sequence[Head], *, means: torch.Tensor | None = None
                ) -> tuple[nn.Module, dict]:
    """A physically pruned copy of ``lm.model`` and the record that rebuilds its shapes.

    Args:
        lm: the model (left untouched).
        heads: heads to remove.
        means: for mean ablation, ``(layers, heads, head_dim)`` means folded into the output bias.

    Raises:
        HeadSpecError: see :func:`plan_layers`; mean ablation on a projection without bias.
    """
    plans = plan_layers(lm, heads)
    adapter, hd = lm.adapter, lm.grid.head_dim
    if means is not None:
        _check_bias_for_mean(lm)
    record = {"paths": adapter.module_paths(), "head_dim": hd, "layers": [p.to_dict() for p in plans],
              "removed": [str(h) for h in sorted(heads)], "base_class": type(lm.model).__name__,
              "original_heads": lm.grid.num_heads, "original_kv_heads": lm.grid.num_kv_heads}
    # Validate done; now build the new weights from the original, then shrink a copy and load them.
    originals = adapter.layers(lm.model)
    new_weights = [_sliced_weights(lm, originals[p.layer], p, means) for p in plans]
    model = copy.deepcopy(lm.model)
    shrink(model, record)
    for plan, layer, weights in zip(plans, adapter.layers(model), new_weights):
        for path, (weight, bias) in weights.items():
            _copy_into(_get(layer, path), weight, bias)
    model.config.headprune = record
    return model, record


def _check_bias_for_mean(lm: LoadedModel) -> None:
    if lm.adapter.output_projection(lm.model, 0).bias is None:
        raise HeadSpecError(f"mean ablation cannot be exported exactly: the {lm.adapter.family} attention output "
                            "projection has no bias to fold the mean into (use --ablation zero)")


def _sliced_weights(lm: LoadedModel, layer: nn.Module, plan: LayerPlan, means: torch.Tensor | None) -> dict:
    adapter, hd, grid = lm.adapter, lm.grid.head_dim, lm.grid
    out: dict = {}
    paths = adapter.qkv_paths
    if adapter.qkv_layout == "separate":
        q, k, v = (_get(layer, p) for p in paths)
        for path, module, blocks in ((paths[0], q, plan.q_heads), (paths[1], k, plan.kv_heads),
                                     (paths[2], v, plan.kv_heads)):
            bias = None if module.bias is None else _rows(module.bias, blocks, hd, 0)
            out[path] = (_rows(module.weight, blocks, hd, 0), bias)
    elif adapter.qkv_layout == "gpt2":
        fused = _get(layer, paths[0])  # Conv1D weight (in, 3 * E), columns [q | k | v]
        width = grid.num_heads * hd
        cols = [part * grid.num_heads + h for part in range(3) for h in plan.q_heads]
        out[paths[0]] = (_rows(fused.weight, cols, hd, 1), _rows(fused.bias, cols, hd, 0))
        assert fused.weight.shape[1] == 3 * width
    else:  # neox: rows [head][q | k | v][head_dim]
        fused = _get(layer, paths[0])
        bias = None if fused.bias is None else _rows(fused.bias, plan.q_heads, 3 * hd, 0)
        out[paths[0]] = (_rows(fused.weight, plan.q_heads, 3 * hd, 0), bias)
    projection = _get(layer, adapter.output_projection_path)
    conv = isinstance(projection, Conv1D)  # Conv1D weight is (in, out): heads are rows
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
    model = copy.deepcopy(lm.model)
    hd = lm.grid.head_dim
    with torch.no_grad():
        for head in checked:
            projection = lm.adapter.output_projection(model, head.layer)
            cols = slice(head.head * hd, (head.head + 1) * hd)
            conv = isinstance(projection, Conv1D)
            block = projection.weight[cols] if conv else projection.weight[:, cols]
            if means is not None:
                projection.bias += (block.T if conv else block) @ means[head.layer, head.head].to(block.dtype)
            block.zero_()
    return model
