"""Reading GGUF files back: a plain parse of the format, and every written tensor compared with what was meant.

``gguf.GGUFReader`` takes a minute over a 49k-token vocabulary; this parse takes well under a second, so an
export reads its whole file back before anything is written in place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from headprune.errors import UnsupportedModelError

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf(path: Path, *, tensors: bool = True) -> tuple[dict, dict, int]:
    """A GGUF file's key/values ``{key: (type, value, array item type)}``, its tensors
    ``{name: (numpy shape, ggml type, absolute offset, bytes)}`` and the data start. A plain parse of the
    format (``gguf.GGUFReader`` takes a minute over a 49k-token vocabulary; this takes well under a second)."""
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


# The largest |stored - written| a stored type's rounding allows, as a share of the tensor's largest |value|, from
# the block formats: F16 and BF16 keep 11 and 8 significant bits; Q8_0 rounds to scale/2 (scale = block max / 127);
# Q5_0 and Q6_K are signed with one step more below zero than above (block max / 16 and / 32 at the clamped end);
# Q5_1, Q4_K and Q5_K keep a minimum and 5 or 4 bits, the K-quants with 6-bit scales of their sub-blocks. Each bound
# is about twice the worst case of its format (measured on SmolLM2-135M: Q8_0 0.004, Q6_K 0.016, Q4_K 0.019, Q5_0
# 0.059); a tensor whose bytes are another's, or garbage, is off by the order of its largest value.
ROUNDING = {"F16": 1e-3, "BF16": 8e-3, "Q8_0": 1e-2, "Q6_K": 5e-2, "Q5_K": 8e-2, "Q5_1": 8e-2, "Q5_0": 8e-2,
            "Q4_K": 0.15}


def read_back(path: Path, expected: dict[str, torch.Tensor], values: dict[str, np.ndarray] | None = None
              ) -> tuple[int, float]:
    """Every tensor of the file against the one written (de-quantised by gguf-py, independently of llama.cpp): how
    many, and the largest absolute difference (0 for float32, which must be bit-identical). ``values``, when given,
    receives each de-quantised tensor.

    Raises:
        UnsupportedModelError: a tensor is missing, extra, or has another shape.
        VerificationError: a stored tensor differs from the written one by more than its type's rounding
            (:data:`ROUNDING`).
    """
    from gguf.quants import dequantize

    from headprune.errors import VerificationError

    _, found, _ = read_gguf(path)
    if set(found) != set(expected):
        odd = sorted(set(found) ^ set(expected))
        raise UnsupportedModelError(f"the written GGUF file's tensors differ from the model's: {', '.join(odd[:4])}")
    worst = 0.0
    with open(path, "rb") as handle:
        for name, want in expected.items():
            shape, kind, offset, nbytes = found[name]
            handle.seek(offset)
            raw = np.frombuffer(handle.read(nbytes), dtype=np.uint8)
            if kind.name == "F32":
                data = raw.view(np.float32).reshape(shape)
            else:
                data = dequantize(raw.reshape(-1, nbytes // max(1, int(np.prod(shape[:-1])))), kind).reshape(shape)
            if tuple(data.shape) != tuple(want.shape):
                raise UnsupportedModelError(f"GGUF tensor {name}: shape {tuple(data.shape)}, expected "
                                            f"{tuple(want.shape)}")
            wanted = want.numpy()
            diff = float(np.abs(data.astype(np.float32) - wanted).max()) if data.size else 0.0
            worst = max(worst, diff)
            scale = float(np.abs(wanted).max()) if wanted.size else 0.0
            if kind.name != "F32" and diff > ROUNDING.get(kind.name, 0.0) * scale:
                raise VerificationError(f"the GGUF file's {kind.name} tensor {name} differs from the pruned weights by "
                                        f"{diff / max(scale, 1e-30):.3g} of its largest |value|, more than {kind.name}'s "
                                        f"rounding allows ({ROUNDING.get(kind.name, 0.0):g}); nothing was written")
            if values is not None:
                values[name] = np.array(data, dtype=np.float32)  # a writable copy (torch shares it)
    return len(expected), worst
