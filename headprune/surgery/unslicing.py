"""A sliced export back in its original shapes, so that it can be pruned again.

A sliced export's layers hold fewer heads than its config's numbering (``config.headprune`` records which original
heads each layer kept), so no head set can be planned on it as it is. Put back in the original shapes, with the
removed heads' query, key and value rows and output-projection columns zero, it computes exactly what the export
computes (a removed head adds nothing to the output), and the heads it lacks are heads like any other: a new export
removes them together with the new ones, named in the numbering the export's record and card use (the original's).
Validate, then build: the record was checked when the export loaded (``loading.model_checks.sliced_record``).
"""

from __future__ import annotations

import copy
from dataclasses import replace

import torch
from torch import nn

from headprune.heads import Head, parse_heads
from headprune.loading.adapters.base import get_path
from headprune.loading.models import LoadedModel
from headprune.surgery.remote_modeling import head_projection, qkv_layout


def sliced_away(lm: LoadedModel) -> tuple[Head, ...]:
    """The heads a sliced export lacks (none for any other model)."""
    record = getattr(lm.model.config, "headprune", None)
    return tuple(parse_heads(",".join(record.get("removed", ())))) if isinstance(record, dict) else ()


def unslice(lm: LoadedModel) -> LoadedModel:
    """``lm`` (a loaded sliced export) as a model of the original shapes with the removed heads zeroed: the same
    outputs, the same tokenizer, folder and class; any other model is returned as it is."""
    record = getattr(lm.model.config, "headprune", None)
    if not isinstance(record, dict):
        return lm
    import transformers

    config = copy.deepcopy(lm.model.config)
    del config.headprune
    if getattr(config, "auto_map", None):  # the export's own modeling file: the stock class builds these shapes
        del config.auto_map
    base = getattr(transformers, record["base_class"])  # checked to be a transformers model class at load
    with torch.device(lm.device):
        full = base(config).to(lm.dtype).eval()
    sliced_layers = [i for i, layer in enumerate(record["layers"]) if layer.get("layout") != "unchanged"]
    adapter = lm.adapter
    paths = [*adapter.qkv_paths, *(p for p, _ in adapter.head_projections), adapter.output_projection_path]
    names = {id(module): name for name, module in lm.model.named_modules()}
    layers = adapter.layers(lm.model)
    rebuilt = {names[id(module)] for i in sliced_layers for path in paths
               if (module := head_projection(layers[i], path)) is not None}
    kept = {key: tensor for key, tensor in lm.model.state_dict().items()
            if key.rsplit(".", 1)[0] not in rebuilt}
    missing, unexpected = full.load_state_dict(kept, strict=False)
    if unexpected or any(key.rsplit(".", 1)[0] not in rebuilt for key in missing):
        raise ValueError(f"a sliced export's tensors do not fit {record['base_class']}: {unexpected or missing}")
    with torch.no_grad():
        for i in sliced_layers:
            _place_layer(lm, full, i, record["layers"][i], int(record["head_dim"]))
    return replace(lm, model=full, grid=adapter.grid(config))


def _place(full: torch.Tensor, sliced: torch.Tensor, blocks: list[int], size: int, dim: int) -> None:
    """Block ``slot`` of ``sliced`` (``size`` wide along ``dim``) into block ``blocks[slot]`` of ``full``, whose
    other blocks are zero."""
    full.zero_()
    for slot, block in enumerate(blocks):
        full.narrow(dim, block * size, size).copy_(sliced.narrow(dim, slot * size, size))


def _place_layer(lm: LoadedModel, full: nn.Module, index: int, layer: dict, hd: int) -> None:
    adapter, grid = lm.adapter, lm.grid
    small, large = adapter.layers(lm.model)[index], adapter.layers(full)[index]
    q_heads, kv_heads = [int(h) for h in layer["q_heads"]], [int(h) for h in layer["kv_heads"]]
    layout = qkv_layout(adapter.qkv_layout)
    for part, path in enumerate(adapter.qkv_paths):
        s, f = get_path(small, path), get_path(large, path)
        blocks = layout.blocks(part, q_heads, kv_heads, grid.num_heads, grid.num_kv_heads)
        _place(f.weight.data, s.weight.data, blocks, layout.size(hd), layout.dim)
        if f.bias is not None:
            _place(f.bias.data, s.bias.data, blocks, layout.size(hd), 0)
    for path, which in adapter.head_projections:  # DeBERTa's position projections: rows by head, as q/k
        s, f = head_projection(small, path), head_projection(large, path)
        if s is not None and f is not None:
            blocks = q_heads if which == "q" else kv_heads
            _place(f.weight.data, s.weight.data, blocks, hd, 0)
            if f.bias is not None:
                _place(f.bias.data, s.bias.data, blocks, hd, 0)
    s, f = get_path(small, adapter.output_projection_path), get_path(large, adapter.output_projection_path)
    _place(f.weight.data, s.weight.data, q_heads, hd, 0 if adapter.projection_is_conv1d else 1)
    if f.bias is not None:
        f.bias.data.copy_(s.bias.data)


__all__ = ["sliced_away", "unslice"]
