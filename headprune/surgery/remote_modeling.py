"""Modeling code for headprune's sliced checkpoints. Imports only torch and transformers.

This file is copied verbatim (with the base class name filled in) into every sliced export as
``modeling_headprune.py``, so ``AutoModel*.from_pretrained(dir, trust_remote_code=True)`` works where
headprune is not installed; ``headprune.load`` uses the same code. The stock model class is built from the
config, then each layer's head projections are re-created with the sizes recorded in
``config.headprune["layers"]``; the weights are then loaded as usual.

Per layer the record says which original query heads are kept (``q_heads``, in order), which original KV
heads back them (``kv_heads``) and which kept query heads are zeroed (``zeroed``). Query slot ``j`` reads
KV slot ``j // (len(q_heads) // len(kv_heads))``, as ``repeat_kv`` expects, unless the layer has a map
(``kv_slots``, the KV slot of each query slot, in order): such a layer's attention module repeats each KV head
for its own query heads and then runs the model's attention function, whichever it is (sdpa, eager, flash).
The key/value cache keeps the layer's KV heads, not the repeated ones.

A model whose layers differ (hybrids of attention and Gated DeltaNet layers, per-layer head sizes) records each
layer's original heads in ``grid`` (its kind, counts and widths; :func:`layer_shapes`) and where each kind keeps
them in ``paths.mixers`` (the attention layers' paths stay ``paths``); a record without ``grid`` is one of a model whose
every layer is an attention layer of ``original_heads`` heads of ``head_dim``.
"""

from __future__ import annotations

import copy
import sys
from types import SimpleNamespace
from typing import Any

import torch
import transformers
from torch import nn
from transformers import AttentionInterface

KV_MAP_ATTENTION = "headprune_kv_map"


class QkvLayout:
    """How a layer stores its query, key and value projections: one class a layout, registered in
    :data:`QKV_LAYOUTS` under the name a record carries (``paths.qkv_layout``).

    A layout says, for each of its projections (``part``: the index of its path in the adapter's ``qkv_paths``: q, k
    and v apart, or one fused), which of its rows a set of kept heads keeps (:meth:`rows`; by default whole blocks,
    :meth:`blocks`, of equal size) and along which axis of the weight they lie (``dim``: 1 for GPT-2's ``Conv1D``,
    whose weight is (in, out)). Slicing takes those rows, :func:`shrink` sizes each projection by them, unslicing
    puts them back in place; a module that keeps its sizes in attributes is told (:meth:`resize`), and a fused
    layout says how llama.cpp's graph orders its rows (:meth:`to_llama_cpp`).

    ``shape`` is the layer's original heads (``heads``, ``kv_heads``, ``head_dim``, ``out_dim``: a
    ``headprune.heads.LayerHeads``, or :func:`layer_shapes`' entry in an export).
    """

    name = ""
    dim = 0

    def blocks(self, part: int, q_heads: list[int], kv_heads: list[int], heads: int, kv: int) -> list[int]:
        """The blocks of projection ``part`` that query heads ``q_heads`` and key/value heads ``kv_heads`` keep, in
        order, of a layer that had ``heads`` query and ``kv`` key/value heads."""
        raise NotImplementedError

    def rows(self, part: int, q_heads: list[int], kv_heads: list[int], shape: Any, extent: int) -> list[int]:
        """The rows (``dim`` 1: columns) of projection ``part``, ``extent`` long in the original layer of ``shape``,
        that ``q_heads`` and ``kv_heads`` keep, in order: its :meth:`blocks`, the projection split in as many equal
        blocks as every head has (a layout of blocks of several sizes overrides this).

        Raises:
            ValueError: the projection does not split evenly into the layout's blocks (not this layout's module).
        """
        heads, kv = shape.heads, shape.kv_heads
        size, odd = divmod(extent, len(self.blocks(part, list(range(heads)), list(range(kv)), heads, kv)))
        if odd or not size:
            raise ValueError(f"qkv layout {self.name!r}: projection {part} ({extent} long) does not split into the "
                             f"blocks of {heads} query and {kv} key/value heads")
        return block_rows(self.blocks(part, q_heads, kv_heads, heads, kv), size)

    def resize(self, attention: nn.Module, n_q: int, n_kv: int, shape: Any) -> None:
        """Tell an attention module that keeps its sizes in attributes of its new head counts."""

    def to_llama_cpp(self, name: str, data: torch.Tensor, head_dim: int) -> torch.Tensor:
        """``data`` (the model's tensor ``name``) as llama.cpp's graph reads it."""
        return data

    def from_llama_cpp(self, name: str, data: torch.Tensor, head_dim: int) -> torch.Tensor:
        """The inverse of :meth:`to_llama_cpp`."""
        return data


def block_rows(blocks: list[int], size: int, offset: int = 0) -> list[int]:
    """The rows of blocks ``blocks`` of ``size`` rows each, after ``offset`` rows."""
    return [offset + block * size + i for block in blocks for i in range(size)]


class Separate(QkvLayout):
    """q, k and v Linear layers: q's blocks by query head, k's and v's by key/value head. A block is what the
    projection holds a head: its head_dim rows, or Qwen3.5's query and gate rows side by side (``q_proj`` rows
    ``[2h * head_dim, 2(h + 1) * head_dim)``, which its gated attention splits per head)."""

    name = "separate"

    def blocks(self, part: int, q_heads: list[int], kv_heads: list[int], heads: int, kv: int) -> list[int]:
        return list(q_heads if part == 0 else kv_heads)


class Gpt2(QkvLayout):
    """GPT-2's one ``Conv1D`` ``c_attn``, weight (in, 3 * E): columns [q heads | k heads | v heads]. llama.cpp stores
    every ``Conv1D`` weight transposed (its converter's ``GPT2Model.modify_tensors``)."""

    name, dim = "gpt2", 1
    _CONV1D = (".c_attn.weight", ".c_proj.weight", ".c_fc.weight")  # the converter's list (mlp.c_proj ends the same)

    def blocks(self, part: int, q_heads: list[int], kv_heads: list[int], heads: int, kv: int) -> list[int]:
        return [third * heads + h for third in range(3) for h in q_heads]

    def resize(self, attention: nn.Module, n_q: int, n_kv: int, shape: Any) -> None:
        attention.split_size = n_q * shape.head_dim

    def to_llama_cpp(self, name: str, data: torch.Tensor, head_dim: int) -> torch.Tensor:
        return data.transpose(0, 1) if name.endswith(self._CONV1D) else data

    from_llama_cpp = to_llama_cpp


class Neox(QkvLayout):
    """GPT-NeoX's one Linear ``query_key_value``, rows [head][q | k | v][head_dim]: a block is a head's three parts.
    llama.cpp's gptneox graph reads [q heads | k heads | v heads] (its converter regroups the rows)."""

    name = "neox"

    def blocks(self, part: int, q_heads: list[int], kv_heads: list[int], heads: int, kv: int) -> list[int]:
        return list(q_heads)

    @staticmethod
    def _regroup(data: torch.Tensor, head_dim: int, per_head: bool) -> torch.Tensor:
        """Rows [head][q|k|v][head_dim] -> [q|k|v][head][head_dim] (``per_head``), or back; the head count is the
        tensor's own, so a sliced layer regroups as the others."""
        heads = data.shape[0] // (3 * head_dim)
        shape = (heads, 3) if per_head else (3, heads)
        return data.reshape(*shape, head_dim, *data.shape[1:]).transpose(0, 1).reshape(data.shape)

    def to_llama_cpp(self, name: str, data: torch.Tensor, head_dim: int) -> torch.Tensor:
        return self._regroup(data, head_dim, True) if ".query_key_value." in name else data

    def from_llama_cpp(self, name: str, data: torch.Tensor, head_dim: int) -> torch.Tensor:
        return self._regroup(data, head_dim, False) if ".query_key_value." in name else data


class Fused(QkvLayout):
    """One Linear, rows [q heads | k heads | v heads] with grouped key/value heads (Phi-3's ``qkv_proj``, ModernBERT's
    ``Wqkv``). Phi-3 splits the rows at ``config.num_attention_heads * head_dim``: a sliced layer gets a config of
    its own with its own count (the model's keeps the original, which the checkpoint's config.json holds)."""

    name = "fused"

    def blocks(self, part: int, q_heads: list[int], kv_heads: list[int], heads: int, kv: int) -> list[int]:
        return [*q_heads, *(heads + k for k in kv_heads), *(heads + kv + k for k in kv_heads)]

    def resize(self, attention: nn.Module, n_q: int, n_kv: int, shape: Any) -> None:
        attention.config = copy.copy(attention.config)
        attention.config.num_attention_heads = n_q
        attention.num_key_value_heads = n_kv


class GatedDeltaNet(QkvLayout):
    """A Gated DeltaNet (Qwen3.5's ``linear_attn``), whose value heads are the heads and its key heads the key/value
    heads: parts ``in_proj_qkv`` and the depthwise ``conv1d`` over its channels, rows ``[q: key heads x head_dim |
    k: key heads x head_dim | v: value heads x out_dim]``, then ``in_proj_z`` (out_dim rows a value head),
    ``in_proj_b`` and ``in_proj_a`` (one). Value head ``j`` reads key head ``j // (heads // kv_heads)``
    (``repeat_interleave``), so a key head goes with the last of its value heads; the module keeps its sizes."""

    name = "gated-deltanet"

    def blocks(self, part: int, q_heads: list[int], kv_heads: list[int], heads: int, kv: int) -> list[int]:
        return list(q_heads)  # z, b and a: a value head's rows

    def rows(self, part: int, q_heads: list[int], kv_heads: list[int], shape: Any, extent: int) -> list[int]:
        if part > 1:
            return super().rows(part, q_heads, kv_heads, shape, extent)
        keys = shape.kv_heads * shape.head_dim
        if extent != 2 * keys + shape.heads * shape.out_dim:
            raise ValueError(f"qkv layout {self.name!r}: {extent} q/k/v channels are not a Gated DeltaNet's "
                             f"{shape.kv_heads} key heads of {shape.head_dim} and {shape.heads} value heads of "
                             f"{shape.out_dim}")
        return [*block_rows(kv_heads, shape.head_dim), *block_rows(kv_heads, shape.head_dim, keys),
                *block_rows(q_heads, shape.out_dim, 2 * keys)]

    def resize(self, attention: nn.Module, n_q: int, n_kv: int, shape: Any) -> None:
        attention.num_v_heads, attention.num_k_heads = n_q, n_kv
        attention.key_dim, attention.value_dim = n_kv * shape.head_dim, n_q * shape.out_dim
        attention.conv_dim = 2 * attention.key_dim + attention.value_dim


class GroupedGatedDeltaNet(GatedDeltaNet):
    """Qwen3-Next's Gated DeltaNet: its projections laid out by key head, ``in_proj_qkvz`` rows ``[q | k | the group's
    v | its z]`` a key head and ``in_proj_ba`` ``[the group's b | its a]``; then ``conv1d`` over ``[q | k | v]`` as
    Qwen3.5's. A sliced layer's value heads are even groups over its key heads (the layout's slots), in order."""

    name = "gated-deltanet-grouped"

    def rows(self, part: int, q_heads: list[int], kv_heads: list[int], shape: Any, extent: int) -> list[int]:
        if part == 1:
            return super().rows(0, q_heads, kv_heads, shape, extent)
        group, per = shape.heads // shape.kv_heads, len(q_heads) // len(kv_heads)
        size, base = (shape.out_dim, 2 * shape.head_dim) if part == 0 else (1, 0)  # a value head's rows, past q|k
        width = base + 2 * group * size  # a key head's block
        if width * shape.kv_heads != extent:
            raise ValueError(f"qkv layout {self.name!r}: projection {part} ({extent} long) is not {shape.kv_heads} "
                             f"key heads' blocks of {width}")
        rows: list[int] = []
        for slot, key in enumerate(kv_heads):
            places = [head - key * group for head in q_heads[slot * per:(slot + 1) * per]]
            rows += [key * width + i for i in range(base)]  # its q and k
            for offset in (base, base + group * size):  # its values' rows (v, b), then their gates' (z, a)
                rows += block_rows(places, size, key * width + offset)
        return rows
class Latent(QkvLayout):
    """Multi-head latent attention (DeepSeek-V2/V3, Mistral 4, GLM-4.7-Flash): its first part is ``kv_b_proj``, which
    expands the key/value latent into each head's key part without RoPE and its value (one block a head); the others
    are query projections, ``head_dim`` rows a head (the part without RoPE, then the rotary part): ``q_b_proj`` after
    the query latent, or ``q_proj`` where there is none (a model has one of the two; the path it lacks is skipped).
    The latents, their norms and the rotary key, which every head shares, stay whole; the module keeps its head count
    in ``num_heads`` (the adapter's ``count_attrs``)."""

    name = "latent"

    def blocks(self, part: int, q_heads: list[int], kv_heads: list[int], heads: int, kv: int) -> list[int]:
        return list(q_heads if part else kv_heads)


# The layouts slicing and the rebuild below handle, by the name records carry; a name claimed twice is an error.
QKV_LAYOUTS: dict[str, QkvLayout] = {}
for _layout in (Separate(), Gpt2(), Neox(), Fused(), GatedDeltaNet(), GroupedGatedDeltaNet(),
                Latent()):
    if _layout.name in QKV_LAYOUTS:
        raise ValueError(f"qkv layout {_layout.name!r} is registered twice")
    QKV_LAYOUTS[_layout.name] = _layout


def qkv_layout(name: str) -> QkvLayout:
    """The layout registered as ``name``.

    Raises:
        ValueError: no layout has that name (slicing a layout it does not know would write a wrong model).
    """
    if name not in QKV_LAYOUTS:
        raise ValueError(f"unknown qkv layout {name!r}; known: {', '.join(QKV_LAYOUTS)}")
    return QKV_LAYOUTS[name]


BASE_CLASS = "{base_class}"  # filled in when the file is written next to a checkpoint


def _get(module: nn.Module, path: str) -> nn.Module:
    for part in path.split("."):
        module = getattr(module, part)
    return module


def _set(module: nn.Module, path: str, value: nn.Module) -> None:
    parent, _, name = path.rpartition(".")
    setattr(_get(module, parent) if parent else module, name, value)


def head_param(module: nn.Module, path: str) -> nn.Parameter | None:
    """The parameter at ``path``, or None where the model has none (Cohere's q/k norms exist only when enabled)."""
    parent, _, name = path.rpartition(".")
    try:
        owner = _get(module, parent) if parent else module
    except AttributeError:
        return None
    found = getattr(owner, name, None)
    return found if isinstance(found, nn.Parameter) else None


def head_projection(module: nn.Module, path: str) -> nn.Module | None:
    """The projection at ``path``, or None where the model has none (DeBERTa's position projections exist only
    without ``share_att_key``; Gemma 4's ``v_proj`` only where values are not keys, and its ``k_proj`` and
    ``v_proj`` only in layers with keys and values of their own; MLA's ``q_proj`` only without a query latent)."""
    try:
        return _get(module, path)
    except AttributeError:
        return None


def _linear(old: nn.Module, out_features: int | None = None, in_features: int | None = None) -> nn.Module:
    """A module like ``old`` (Linear, GPT-2 Conv1D, or a depthwise convolution: one channel a row) with new sizes, on
    ``old``'s device and dtype."""
    weight = old.weight
    if type(old).__name__ == "Conv1D":  # weight is (in, out)
        new = type(old)(out_features or weight.shape[1], in_features or weight.shape[0])
        return new.to(device=weight.device, dtype=weight.dtype)
    if isinstance(old, nn.Conv1d):  # depthwise (a Gated DeltaNet's over its q/k/v channels): (channels, 1, kernel)
        channels = out_features or old.out_channels
        return nn.Conv1d(channels, channels, old.kernel_size, groups=channels, padding=old.padding,
                         bias=old.bias is not None, device=weight.device, dtype=weight.dtype)
    # Built in place: no float32 copy first (a model's worth of them for a big checkpoint in bfloat16).
    return nn.Linear(in_features or old.in_features, out_features or old.out_features, bias=old.bias is not None,
                     device=weight.device, dtype=weight.dtype)


def kv_mapped_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                        attention_mask: torch.Tensor | None, **kwargs):  # noqa: ANN003, ANN201
    """Attention for a layer whose query heads read unevenly many per KV head (``module.headprune_kv_counts``,
    query heads per KV head in order): repeat each KV head that often, then run the model's own attention."""
    counts = module.headprune_kv_counts
    key, value = (torch.cat([t[:, i:i + 1].expand(-1, n, -1, -1) for i, n in enumerate(counts)], dim=1)
                  for t in (key, value))
    eager = sys.modules[type(module).__module__].eager_attention_forward
    inner = transformers.modeling_utils.ALL_ATTENTION_FUNCTIONS.get_interface(
        module.headprune_model_config._attn_implementation, eager)
    return inner(module, query, key, value, attention_mask, **kwargs)


AttentionInterface.register(KV_MAP_ATTENTION, kv_mapped_attention)


def _map_kv(attention: nn.Module, kv_slots: list[int]) -> None:
    """Give ``attention`` (its KV heads already sliced) the uneven query-to-KV map ``kv_slots``."""
    if list(kv_slots) != sorted(kv_slots):
        raise ValueError(f"kv_slots must be in KV order, not {kv_slots}")
    attention.headprune_kv_counts = [kv_slots.count(slot) for slot in range(max(kv_slots) + 1)]
    attention.headprune_model_config = attention.config  # the model's: its attention function may change later
    attention.config = copy.copy(attention.config)  # this layer's own, dispatching to kv_mapped_attention
    attention.config._attn_implementation_internal = KV_MAP_ATTENTION
    attention.num_key_value_groups = 1  # the map has repeated the KV heads already


def layer_shapes(record: dict) -> list[Any]:
    """Each layer's original heads as ``record`` gives them (``kind``, ``heads``, ``kv_heads``, ``head_dim``,
    ``out_dim``): its ``grid`` where the layers differ, else ``original_heads`` query heads over
    ``original_kv_heads`` of ``head_dim`` in every layer."""
    if record.get("grid"):
        return [SimpleNamespace(**layer) for layer in record["grid"]]
    head_dim = int(record["head_dim"])
    every = SimpleNamespace(kind="attention", heads=int(record["original_heads"]),
                            kv_heads=int(record["original_kv_heads"]), head_dim=head_dim, out_dim=head_dim)
    return [every] * len(record["layers"])


def mixer_paths(record: dict, kind: str) -> dict:
    """Where a layer of ``kind`` keeps its heads: the attention layers' ``paths``, or those of another mixer."""
    return record["paths"] if kind == "attention" else record["paths"]["mixers"][kind]


def shrink(model: nn.Module, record: dict) -> None:
    """Re-create every head projection with the per-layer head counts of ``record`` (weights unset)."""
    layers = _get(model.base_model, record["paths"]["layers"])
    for layer_record, layer, shape in zip(record["layers"], layers, layer_shapes(record)):
        if layer_record.get("layout") != "unchanged":  # an unchanged layer keeps the stock sizes
            _shrink_layer(layer, layer_record, shape, mixer_paths(record, shape.kind))


def _shrink_layer(layer: nn.Module, layer_record: dict, shape: Any, paths: dict) -> None:
    q_heads, kv_heads = list(layer_record["q_heads"]), list(layer_record["kv_heads"])
    n_q, n_kv, head_dim = len(q_heads), len(kv_heads), shape.head_dim
    attention = _get(layer, paths["attention"])
    layout = qkv_layout(paths["qkv_layout"])
    for part, path in enumerate(paths["qkv"]):
        old = head_projection(layer, path)
        if old is None:  # a layer without it (Gemma 4's: no v_proj where keys are values, no k/v where shared;
            # MLA's q_proj beside a query latent)
            continue
        rows = layout.rows(part, q_heads, kv_heads, shape, old.weight.shape[layout.dim])
        _set(layer, path, _linear(old, out_features=len(rows)))
    layout.resize(attention, n_q, n_kv, shape)
    _set(layer, paths["output"], _linear(_get(layer, paths["output"]), in_features=n_q * shape.out_dim))
    for path, which in paths.get("head_projections", ()):  # head_dim rows a head: DeBERTa's position projections
        old = head_projection(layer, path)
        if old is not None:
            _set(layer, path, _linear(old, out_features=(n_q if which == "q" else n_kv) * head_dim))
    for path, which in paths.get("head_params", ()):  # a row per head: GPT-OSS's sinks, per-head norms
        old = head_param(layer, path)
        if old is not None:
            rows = n_q if which == "q" else n_kv
            _set(layer, path, nn.Parameter(torch.empty(rows, *old.shape[1:], dtype=old.dtype, device=old.device),
                                           requires_grad=False))
    if hasattr(attention, "num_key_value_groups"):
        attention.num_key_value_groups = n_q // n_kv
    if layer_record.get("kv_slots"):
        _map_kv(attention, layer_record["kv_slots"])
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
