"""Mixture-of-experts tensors as llama.cpp's graphs take them: one stacked tensor per projection.

transformers keeps a layer's experts fused, in one of three layouts (the family file's ``Gguf.experts``): ``rows``
(Mixtral, Qwen3-MoE, OLMoE, GLM-4.5, ERNIE 4.5, Granite 4: ``gate_up_proj`` (experts, 2 * ff, hidden), gate rows
then up rows, ``down_proj`` (experts, hidden, ff)); ``columns`` (Llama 4 multiplies ``x @ W``: ``gate_up_proj``
(experts, hidden, 2 * ff), gate columns then up columns, ``down_proj`` (experts, ff, hidden)); ``interleaved``
(GPT-OSS: as ``columns`` with gate and up columns alternating, and biases beside). llama.cpp's converter splits and
transposes them into ``ffn_gate_exps``, ``ffn_up_exps`` and ``ffn_down_exps`` (and their biases); so does
:func:`split_experts`, and :func:`join_experts` undoes it for a lossy file's check.
"""

from __future__ import annotations

import torch

_PARTS = ("gate_up_proj", "gate_up_proj_bias", "down_proj", "down_proj_bias")


def _part(name: str) -> tuple[str, str] | None:
    """(layer, part) of an experts' tensor, or None for any other."""
    if ".experts." not in name or name.rsplit(".", 1)[1] not in _PARTS:  # (Granite's: block_sparse_moe.experts)
        return None
    return name.split(".layers.")[1].split(".")[0], name.rsplit(".", 1)[1]


def split_experts(name: str, data: torch.Tensor, layout: str) -> dict[str, torch.Tensor] | None:
    """The GGUF tensors of one of transformers' fused experts' tensors (``layout``: ``Gguf.experts``), or None when
    ``name`` is not one."""
    found = _part(name)
    if found is None:
        return None
    layer, part = found
    suffix = "bias" if part.endswith("_bias") else "weight"
    x_at_w = layout != "rows" and suffix == "weight"  # stored (in, out): llama.cpp's rows are the outputs

    def gguf(kind: str) -> str:
        return f"blk.{layer}.ffn_{kind}_exps.{suffix}"

    if part.startswith("down_proj"):  # (experts, ff, hidden) for x @ W: llama.cpp's (experts, hidden, ff)
        return {gguf("down"): data.transpose(-1, -2) if x_at_w else data}
    if layout == "interleaved":  # gate and up alternate along the last dimension
        data = data.transpose(-1, -2) if suffix == "weight" else data.unsqueeze(-1)
        gate, up = data[:, ::2], data[:, 1::2]
        if suffix == "bias":
            gate, up = gate.squeeze(-1), up.squeeze(-1)
    else:
        gate, up = (data.transpose(-1, -2) if x_at_w else data).chunk(2, dim=1)
    return {gguf("gate"): gate.contiguous(), gguf("up"): up.contiguous()}


def join_experts(name: str, stored: dict, layout: str) -> torch.Tensor | None:
    """transformers' fused tensor back from a file's (de-quantised) stacked ones, or None: not an experts' tensor or
    not in ``stored``."""
    found = _part(name)
    if found is None:
        return None
    layer, part = found
    suffix = "bias" if part.endswith("_bias") else "weight"
    kinds = ("down",) if part.startswith("down_proj") else ("gate", "up")
    names = [f"blk.{layer}.ffn_{kind}_exps.{suffix}" for kind in kinds]
    if not all(n in stored for n in names):
        return None
    parts = [torch.as_tensor(stored[n]) for n in names]
    x_at_w = layout != "rows" and suffix == "weight"
    if len(parts) == 1:
        return parts[0].transpose(-1, -2) if x_at_w else parts[0]
    if layout != "interleaved":
        joined = torch.cat(parts, dim=1)
        return joined.transpose(-1, -2) if x_at_w else joined
    gate, up = (p if suffix == "weight" else p.unsqueeze(-1) for p in parts)
    joined = torch.stack((gate, up), dim=2).flatten(1, 2)  # rows gate0, up0, gate1, ...
    return joined.transpose(-1, -2) if suffix == "weight" else joined.squeeze(-1)
