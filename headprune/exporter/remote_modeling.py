"""Modeling code for headprune's sliced checkpoints. Imports only torch and transformers.

This file is copied verbatim (with the base class name filled in) into every sliced export as
``modeling_headprune.py``, so ``AutoModel*.from_pretrained(dir, trust_remote_code=True)`` works where
headprune is not installed; ``headprune.load`` uses the same code. The stock model class is built from the
config, then each layer's attention projections are re-created with the sizes recorded in
``config.headprune["layers"]``; the weights are then loaded as usual.

Per layer the record says which original query heads are kept (``q_heads``, in order), which original KV
heads back them (``kv_heads``) and which kept query heads are zeroed (``zeroed``). Query slot ``j`` reads
KV slot ``j // (len(q_heads) // len(kv_heads))``, as ``repeat_kv`` expects.
"""

from __future__ import annotations

import transformers
from torch import nn

BASE_CLASS = "{base_class}"  # filled in when the file is written next to a checkpoint


def _get(module: nn.Module, path: str) -> nn.Module:
    for part in path.split("."):
        module = getattr(module, part)
    return module


def _set(module: nn.Module, path: str, value: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(_get(module, parent) if parent else module, name, value)


def _linear(old: nn.Module, out_features: int | None = None, in_features: int | None = None) -> nn.Module:
    """A module like ``old`` (Linear or GPT-2 Conv1D) with new sizes, on ``old``'s device and dtype."""
    weight = old.weight
    if type(old).__name__ == "Conv1D":  # weight is (in, out)
        new = type(old)(out_features or weight.shape[1], in_features or weight.shape[0])
    else:
        new = nn.Linear(in_features or old.in_features, out_features or old.out_features, bias=old.bias is not None)
    return new.to(device=weight.device, dtype=weight.dtype)


def shrink(model: nn.Module, record: dict) -> None:
    """Re-create every attention projection with the per-layer head counts of ``record`` (weights unset)."""
    paths, head_dim = record["paths"], int(record["head_dim"])
    layers = _get(model.base_model, paths["layers"])
    for layer_record, layer in zip(record["layers"], layers):
        n_q, n_kv = len(layer_record["q_heads"]), len(layer_record["kv_heads"])
        attention = _get(layer, paths["attention"])
        qkv = paths["qkv"]
        if paths["qkv_layout"] == "separate":
            q, k, v = (_get(layer, p) for p in qkv)
            _set(layer, qkv[0], _linear(q, out_features=n_q * head_dim))
            _set(layer, qkv[1], _linear(k, out_features=n_kv * head_dim))
            _set(layer, qkv[2], _linear(v, out_features=n_kv * head_dim))
        elif paths["qkv_layout"] == "gpt2":
            _set(layer, qkv[0], _linear(_get(layer, qkv[0]), out_features=3 * n_q * head_dim))
            attention.split_size = n_q * head_dim
        elif paths["qkv_layout"] == "neox":
            _set(layer, qkv[0], _linear(_get(layer, qkv[0]), out_features=3 * n_q * head_dim))
        else:
            raise ValueError(f"unknown qkv layout {paths['qkv_layout']!r}")
        _set(layer, paths["output"], _linear(_get(layer, paths["output"]), in_features=n_q * head_dim))
        if hasattr(attention, "num_key_value_groups"):
            attention.num_key_value_groups = n_q // n_kv
        for attr in paths["count_attrs"]:
            setattr(attention, attr, n_q)
        if hasattr(attention, "all_head_size"):
            attention.all_head_size = n_q * head_dim


def headpruned_class(base_class: str) -> type:
    """The stock ``base_class`` (e.g. ``LlamaForCausalLM``) with attention shrunk after construction."""
    base = getattr(transformers, base_class)

    class HeadprunedModel(base):  # type: ignore[misc, valid-type]
        def __init__(self, config, *args, **kwargs) -> None:  # noqa: ANN001, ANN002, ANN003
            super().__init__(config, *args, **kwargs)
            shrink(self, config.headprune)

        @classmethod
        def is_custom_code(cls) -> bool:
            # Same weight names as the stock class: let transformers apply its checkpoint key renamings.
            return False

    # Keep the stock class name: transformers looks up checkpoint key renamings (e.g. GPT-NeoX's
    # embed_out <-> lm_head) by class name when saving and loading.
    HeadprunedModel.__name__ = HeadprunedModel.__qualname__ = base_class
    return HeadprunedModel


if not BASE_CLASS.startswith("{"):
    HeadprunedModel = headpruned_class(BASE_CLASS)
