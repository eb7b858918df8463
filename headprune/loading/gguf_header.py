"""A GGUF file's header read as it is written (key/values, tensor infos), and the head counts a GGUF model's keys
give checked before transformers builds a config from them.

``gguf.GGUFReader`` takes a minute over a 49k-token vocabulary; this plain parse takes well under a second. A file
whose ``ARCH.attention.head_count`` does not divide its ``ARCH.embedding_length`` (without an ``ARCH.attention.
key_length`` that sets the head size apart) makes transformers' config raise its own validation error, which says
nothing of the file: :func:`check_head_counts` names the key instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from headprune.errors import UnsupportedModelError

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf(path: Path, *, tensors: bool = True, spans: list | None = None) -> tuple[dict, dict, int]:
    """A GGUF file's key/values ``{key: (type, value, array item type)}``, its tensors
    ``{name: (numpy shape, ggml type, absolute offset, bytes)}`` and the data start. A plain parse of the
    format (``gguf.GGUFReader`` takes a minute over a 49k-token vocabulary; this takes well under a second).
    ``spans``, when given, receives ``(key, first byte, byte after)`` of each key/value entry."""
    import mmap
    import struct

    import gguf

    with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as view:
        pos = 0

        def take(fmt: str) -> Any:
            nonlocal pos
            (value,) = struct.unpack_from(fmt, view, pos)
            pos += struct.calcsize(fmt)
            return value

        def text() -> str:
            nonlocal pos
            n = take("<Q")
            value = bytes(view[pos: pos + n]).decode("utf-8", errors="surrogateescape")
            pos += n
            return value

        def value(kind: int) -> Any:
            if kind == 8:
                return text()
            return take(_SCALARS[kind])

        if bytes(view[:4]) != b"GGUF":
            raise UnsupportedModelError(f"{path} is not a GGUF file")
        pos = 4
        take("<I")
        n_tensors, n_kv = take("<Q"), take("<Q")
        fields: dict = {}
        for _ in range(n_kv):
            begin = pos
            key, kind = text(), take("<I")
            if kind == 9:
                sub, n = take("<I"), take("<Q")
                if sub in _SCALARS:
                    fmt = _SCALARS[sub]
                    size = struct.calcsize(fmt)
                    items = list(np.frombuffer(view, dtype=np.dtype(fmt), count=n, offset=pos).tolist())
                    pos += size * n
                else:
                    items = [value(sub) for _ in range(n)]
                fields[key] = (gguf.GGUFValueType(kind), items, gguf.GGUFValueType(sub))
            else:
                fields[key] = (gguf.GGUFValueType(kind), value(kind), None)
            if spans is not None:
                spans.append((key, begin, pos))
        infos: dict = {}
        for _ in range(n_tensors if tensors else 0):
            name = text()
            dims = [take("<Q") for _ in range(take("<I"))]
            kind, offset = take("<I"), take("<Q")
            block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(kind)]
            infos[name] = (tuple(reversed(dims)), gguf.GGMLQuantizationType(kind), offset,
                           int(np.prod(dims)) // block * size)
        alignment = fields.get("general.alignment", (None, 32, None))[1]
        start = -(-pos // alignment) * alignment
    return fields, {k: (shape, kind, start + off, n) for k, (shape, kind, off, n) in infos.items()}, start


def check_head_counts(path: Path) -> None:
    """Refuse a GGUF model whose head counts no attention layer can have: zero or negative; a key/value head count
    that does not divide the query head count; a query head count that does not divide the embedding width (where
    no ``key_length`` sets the head size apart) or whose heads of ``key_length`` are not the rows of layer 0's query
    projection. Per-layer counts (arrays, llama.cpp's own architectures) are left to their loader.

    Raises:
        UnsupportedModelError: naming the key and its value.
    """
    fields, tensors, _ = read_gguf(path)
    arch = fields.get("general.architecture", (None, None, None))[1]
    if not isinstance(arch, str):
        return  # transformers says what it cannot read

    def scalar(key: str) -> int | None:
        value = fields.get(f"{arch}.{key}", (None, None, None))[1]
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    width, heads, kv = scalar("embedding_length"), scalar("attention.head_count"), scalar("attention.head_count_kv")
    size, query = scalar("attention.key_length"), tensors.get("blk.0.attn_q.weight")
    if heads is None:
        return
    if heads <= 0 or kv is not None and kv <= 0:
        key, value = ("head_count", heads) if heads <= 0 else ("head_count_kv", kv)
        why = "a head count is at least 1"
    elif size is None and width and width % heads:
        key, value, why = "head_count", heads, f"it does not divide {arch}.embedding_length {width}"
    elif size is not None and query is not None and query[0][0] != heads * size:
        key, value, why = "head_count", heads, (f"blk.0.attn_q.weight holds {query[0][0]} rows, not {heads} heads of "
                                               f"{arch}.attention.key_length {size}")
    elif kv is not None and heads % kv:
        key, value, why = "head_count_kv", kv, f"it does not divide {arch}.attention.head_count {heads}"
    else:
        return
    raise UnsupportedModelError(f"{path}: {arch}.attention.{key} is {value}: {why}; no model has such heads (the "
                                "file was changed, or made by a broken converter)")
