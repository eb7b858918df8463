"""GPT-2's and GPT-NeoX's fused tensors as llama.cpp's ``gpt2`` and ``gptneox`` graphs take them.

From llama.cpp's converter (``convert_hf_to_gguf.py``):

- ``GPT2Model.modify_tensors``: GPT-2's ``Conv1D`` weights (``c_attn``, ``c_proj``, ``c_fc``) are stored (in, out),
  llama.cpp's matrices (out, in): transposed. ``c_attn``'s columns are already [q heads | k heads | v heads], the
  order the graph's views read (``attn_qkv``: q at 0, k at n_embd, v at 2 * n_embd).
- ``GPTNeoXModel.modify_tensors``: NeoX's ``query_key_value`` rows (and bias) are grouped per head,
  ``[head][q | k | v][head_dim]``; the graph reads ``[q heads | k heads | v heads]``, so the rows are regrouped.

Which family has which layout: ``GgufFamily.qkv_layout`` (:mod:`headprune.exporter.gguf.families`), the adapter's
name for it. :func:`to_llama_cpp` writes a tensor, :func:`from_llama_cpp` undoes it for a lossy file's check.
"""

from __future__ import annotations

import torch

_CONV1D = (".c_attn.weight", ".c_proj.weight", ".c_fc.weight")  # the converter's list (mlp.c_proj ends the same)


def _neox_qkv(name: str) -> bool:
    return name.endswith((".attention.query_key_value.weight", ".attention.query_key_value.bias"))


def _regroup(data: torch.Tensor, head_dim: int, per_head: bool) -> torch.Tensor:
    """Rows ``[head][q|k|v][head_dim]`` -> ``[q|k|v][head][head_dim]`` (``per_head``), or back. The head count is
    the tensor's own, so a sliced layer (fewer heads) regroups as the others."""
    heads = data.shape[0] // (3 * head_dim)
    shape = (heads, 3) if per_head else (3, heads)
    return data.reshape(*shape, head_dim, *data.shape[1:]).transpose(0, 1).reshape(data.shape)


def to_llama_cpp(name: str, data: torch.Tensor, layout: str | None, head_dim: int) -> torch.Tensor:
    """``data`` (the model's tensor ``name``) as llama.cpp's graph reads it, for a family of qkv ``layout``."""
    if layout == "gpt2" and name.endswith(_CONV1D):
        return data.transpose(0, 1)
    if layout == "neox" and _neox_qkv(name):
        return _regroup(data, head_dim, per_head=True)
    return data


def from_llama_cpp(name: str, data: torch.Tensor, layout: str | None, head_dim: int) -> torch.Tensor:
    """The inverse of :func:`to_llama_cpp`: a file's tensor back in the model's layout."""
    if layout == "gpt2" and name.endswith(_CONV1D):
        return data.transpose(0, 1)
    if layout == "neox" and _neox_qkv(name):
        return _regroup(data, head_dim, per_head=False)
    return data
