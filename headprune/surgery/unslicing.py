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
from headprune.surgery.remote_modeling import head_param, head_projection, qkv_layout


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
    resized = _resized(lm, sliced_layers)
    kept = {key: tensor for key, tensor in lm.model.state_dict().items() if key not in resized}
    missing, unexpected = full.load_state_dict(kept, strict=False)
    if unexpected or set(missing) - resized:
        raise ValueError(f"a sliced export's tensors do not fit {record['base_class']}: {unexpected or missing}")
    with torch.no_grad():
        for i in sliced_layers:
            _place_layer(lm, full, i, record["layers"][i])
    return replace(lm, model=full, grid=adapter.grid(config))


def _resized(lm: LoadedModel, sliced_layers: list[int]) -> set[str]:
    """The state-dict names of the tensors the sliced layers hold smaller: their q/k/v projections', DeBERTa's
    position projections', the output projection's, and their per-head parameters (put back by :func:`_place_layer`,
    the rest is loaded as it is)."""
    names = {id(module): name for name, module in lm.model.named_modules()}
    layers, found = lm.adapter.layers(lm.model), set()
    for i in sliced_layers:
        mixer, prefix = lm.adapter.mixer(lm.grid.layers[i].kind), names[id(layers[i])]
        for path in (*mixer.qkv_paths, *(p for p, _ in mixer.head_projections), mixer.output_projection_path):
            module = head_projection(layers[i], path)
            if module is not None:
                found |= {f"{prefix}.{path}.{name}" for name, _ in module.named_parameters()}
        found |= {f"{prefix}.{path}" for path, _ in mixer.head_params if head_param(layers[i], path) is not None}
    return found


def _place(full: torch.Tensor, sliced: torch.Tensor, rows: list[int], dim: int) -> None:
    """Row (along ``dim``) ``slot`` of ``sliced`` into row ``rows[slot]`` of ``full``, whose other rows are zero."""
    full.zero_()
    full.index_copy_(dim, torch.tensor(rows, device=full.device), sliced)


def _blocks(blocks: list[int], size: int) -> list[int]:
    return [block * size + i for block in blocks for i in range(size)]


def _place_layer(lm: LoadedModel, full: nn.Module, index: int, layer: dict) -> None:
    adapter, shape = lm.adapter, lm.grid.layers[index]
    mixer = adapter.mixer(shape.kind)
    small, large = adapter.layers(lm.model)[index], adapter.layers(full)[index]
    q_heads, kv_heads = [int(h) for h in layer["q_heads"]], [int(h) for h in layer["kv_heads"]]
    layout = qkv_layout(mixer.qkv_layout)
    for part, path in enumerate(mixer.qkv_paths):
        s, f = head_projection(small, path), head_projection(large, path)
        if s is None or f is None:  # a layer without it (Gemma 4's shared keys and values; MLA's q_proj beside a
            # query latent)
            continue
        rows = layout.rows(part, q_heads, kv_heads, shape, f.weight.shape[layout.dim])
        _place(f.weight.data, s.weight.data, rows, layout.dim)
        if f.bias is not None:
            _place(f.bias.data, s.bias.data, rows, 0)
    for path, which in mixer.head_projections:  # DeBERTa's position projections: rows by head, as q/k
        s, f = head_projection(small, path), head_projection(large, path)
        if s is not None and f is not None:
            rows = _blocks(q_heads if which == "q" else kv_heads, shape.head_dim)
            _place(f.weight.data, s.weight.data, rows, 0)
            if f.bias is not None:
                _place(f.bias.data, s.bias.data, rows, 0)
    for path, which in mixer.head_params:  # a row per head (sinks, per-head norms, a Gated DeltaNet's dt_bias)
        s, f = head_param(small, path), head_param(large, path)
        if s is not None and f is not None:
            _place(f.data, s.data, q_heads if which == "q" else kv_heads, 0)
    s, f = get_path(small, mixer.output_projection_path), get_path(large, mixer.output_projection_path)
    _place(f.weight.data, s.weight.data, _blocks(q_heads, shape.out_dim), 0 if mixer.projection_is_conv1d else 1)
    if f.bias is not None:
        f.bias.data.copy_(s.bias.data)


__all__ = ["sliced_away", "unslice"]
