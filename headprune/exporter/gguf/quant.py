"""GGUF K-quants (``q4_k_m``, ``q5_k_m``, ``q6_k``) made by llama.cpp's own quantizer.

For each tensor of a float file, llama.cpp's ``llama_model_quantize`` (``src/llama-quant.cpp``) does two things: it
picks the tensor's type (``llama_tensor_get_type``: the file type's default, more bits for some tensors in the ``_M``
mixtures, a fallback where the type's blocks do not divide a row) and quantizes its rows with
``ggml_quantize_chunk``. The llama.cpp headprune runs, xllamacpp's library, exports ``ggml_quantize_chunk`` but not
``llama_model_quantize`` (``nm -D`` of releases 2026.9.11063 and 2026.10.11549); llama-cpp-python, which exports it,
is only a source build on PyPI, and llama-cpp-py-sync's wheels need glibc 2.38. So headprune calls
``ggml_quantize_chunk`` itself, and ``ggml_validate_row_data`` on what it wrote, as ``llama_tensor_quantize_impl``
does without an importance matrix: the bytes are llama.cpp's. The type choice is reproduced below only as far as
llama-quant.cpp states it for what headprune writes: the ``llama``, ``qwen2`` and ``deci`` architectures (no experts,
not Falcon), no importance matrix, and ``llama_model_quantize_default_params`` (the output tensor quantized, no type
overrides, not pure). The llama-quant.cpp of both supported releases agree on it (they differ only for GLM5-next).
The written file is then loaded and run in llama.cpp before anything is kept.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from headprune.errors import MissingExtraError

# gguf_type: (its llama_ftype, the default tensor type of that ftype: llama_ftype_get_default_type)
K_QUANTS = {"q4_k_m": (15, "Q4_K"), "q5_k_m": (17, "Q5_K"), "q6_k": (18, "Q6_K")}
# tensor_type_fallback: a type whose 256-wide blocks do not divide a row falls back to a 32-wide one; F16 after that.
FALLBACK = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}
CHUNK_VALUES = 1 << 22  # values quantized per call into llama.cpp (well under a second for every type)
NEEDS = ("ggml_quantize_chunk", "ggml_validate_row_data", "ggml_row_size", "ggml_blck_size")


def quantizer_library() -> Any:
    """The llama.cpp binding whose library quantizes (xllamacpp's), loaded and checked.

    Raises:
        MissingExtraError: no llama.cpp, or one whose quantizer headprune does not call (llama-cpp-python).
    """
    from headprune.exporter.llama_cpp.binding import library, runtime_version

    version, reason = runtime_version()
    if version is None:
        raise MissingExtraError(f"K-quant GGUF files are made by llama.cpp's own quantizer: {reason}")
    binding = library()
    if not all(hasattr(binding.lib, name) for name in NEEDS):
        raise MissingExtraError(f"K-quant GGUF files are made through xllamacpp's llama.cpp library, and the "
                                f"llama.cpp here is {binding.runtime}: pip install 'headprune[gguf]'")
    return binding


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    """llama-quant.cpp's ``use_more_bits``: the first and last eighth of the layers, and every third between."""
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or (i_layer - n_layers // 8) % 3 == 2


def _layer(name: str) -> int:
    """The ``blk.N.`` number of a tensor name (-1 for the others), as llama.cpp's ``weight_name_comparer`` reads it."""
    parts = name.split(".")
    return int(parts[1]) if parts[0] == "blk" and parts[1].isdigit() else -1


def _category(name: str) -> str:
    """llama-quant.cpp's ``tensor_get_category`` for the tensors headprune writes."""
    if name == "output.weight":
        return "output"
    if name == "token_embd.weight":
        return "token_embd"
    for key in ("attn_v.weight", "attn_k.weight", "attn_q.weight", "attn_output.weight", "ffn_up", "ffn_gate",
                "ffn_down"):
        if key in name:
            return key.removesuffix(".weight")
    return "other"


def tensor_types(columns: Mapping[str, tuple[int, int]], gguf_type: str, *, arch: str, n_layer: int, n_head: int,
                 n_head_kv: int, block: Callable[[str], int]) -> dict[str, str]:
    """The GGML type of each tensor in a ``gguf_type`` file, as llama.cpp's ``llama_tensor_get_type`` picks it.

    Args:
        columns: tensor name -> (dimensions, ``ne[0]``: the row length, a torch weight's last dimension).
        arch: the GGUF architecture (llama, qwen2 or deci); ``n_head``/``n_head_kv``: layer 0's (its ``n_head()``).
        block: a GGML type's block size (``ggml_blck_size``).
    """
    ftype, default = K_QUANTS[gguf_type]
    mixture = gguf_type in ("q4_k_m", "q5_k_m")
    # LLM_TYPE_70B (models/llama.cpp, qwen2.cpp, deci.cpp): 80 layers (llama: with grouped key/value heads).
    is_70b = n_layer == 80 and (arch != "llama" or n_head != n_head_kv)
    tied = "output.weight" not in columns
    n_attention_wv = sum(1 for name in columns if _category(name) == "attn_v")
    i_attention_wv = i_ffn_down = 0
    out = {}
    for name in sorted(columns, key=lambda n: (_layer(n), n)):  # llama.cpp's weights_map order
        dims, ne0 = columns[name]
        if dims < 2 or not name.endswith("weight") or "_norm.weight" in name:  # tensor_allows_quantization
            out[name] = "F32"
            continue
        category, new = _category(name), default
        if category == "output" or (tied and category == "token_embd"):
            new = "Q8_0" if ne0 % block(new) else new if new == "Q8_0" else "Q6_K"
        elif category == "attn_v":
            if mixture and use_more_bits(i_attention_wv, n_attention_wv):
                new = "Q6_K"
            if is_70b and new in ("Q3_K", "Q4_K"):
                new = "Q5_K"
            i_attention_wv += 1
        elif category == "ffn_down":
            if mixture and use_more_bits(i_ffn_down, n_layer):
                new = "Q6_K"
            i_ffn_down += 1
        if ne0 % block(new):  # tensor_type_fallback
            new = FALLBACK.get(new, new)
            if ne0 % block(new):
                new = "F16"
        out[name] = new
    return out


def quantize(binding: Any, data: np.ndarray, type_name: str) -> np.ndarray:
    """``data`` (rows of ``ne[0]`` floats) quantized by llama.cpp's ``ggml_quantize_chunk``: ``(rows, bytes per
    row)`` uint8, as a GGUF file stores it.

    Raises:
        ValueError: llama.cpp's own check of the quantized rows (``ggml_validate_row_data``) failed.
    """
    import ctypes

    lib, ggml_type = binding.lib, binding.decls.CONSTANTS[f"GGML_TYPE_{type_name}"]
    src = np.ascontiguousarray(data.reshape(-1, data.shape[-1]), dtype=np.float32)
    rows, n_per_row = src.shape
    row_bytes = int(lib.ggml_row_size(ggml_type, n_per_row))
    out = np.empty((rows, row_bytes), dtype=np.uint8)
    written, step = 0, max(1, CHUNK_VALUES // n_per_row)  # rows per call: a Ctrl-C waits for one chunk at most
    for start in range(0, rows, step):
        written += lib.ggml_quantize_chunk(ggml_type, src.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                           out.ctypes.data_as(ctypes.c_void_p), start * n_per_row,
                                           min(step, rows - start), n_per_row, None)
    if written != out.nbytes or not lib.ggml_validate_row_data(ggml_type, out.ctypes.data_as(ctypes.c_void_p),
                                                                 out.nbytes):
        raise ValueError(f"llama.cpp's quantizer wrote {written} of {out.nbytes} bytes of {type_name}, or rows its "
                         "own check refuses")
    return out


def typer(tensors: Mapping[str, Any], gguf_type: str, *, arch: str, head_count: tuple[int, ...],
          head_count_kv: tuple[int, ...]) -> tuple[Callable[[str, np.ndarray], tuple[np.ndarray, Any]], dict[str, str]]:
    """What ``writer.write_gguf`` stores for each tensor of a ``gguf_type`` file, and the type of each.

    ``tensors``: name -> float32 tensor, in the shapes the file holds (``rope_freqs`` and 1-D tensors stay float32).
    """
    import gguf

    binding = quantizer_library()
    block = {}

    def block_size(type_name: str) -> int:
        if type_name not in block:
            block[type_name] = int(binding.lib.ggml_blck_size(binding.decls.CONSTANTS[f"GGML_TYPE_{type_name}"]))
        return block[type_name]

    columns = {name: (len(t.shape), int(t.shape[-1])) for name, t in tensors.items()}
    types = tensor_types(columns, gguf_type, arch=arch, n_layer=len(head_count), n_head=head_count[0],
                         n_head_kv=head_count_kv[0], block=block_size)

    def typed(name: str, data: np.ndarray) -> tuple[np.ndarray, Any]:
        type_name = types.get(name, "F32")
        if type_name == "F32":
            return data.astype(np.float32), gguf.GGMLQuantizationType.F32
        return quantize(binding, data, type_name), gguf.GGMLQuantizationType[type_name]

    return typed, types
