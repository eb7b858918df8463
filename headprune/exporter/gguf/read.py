"""Reading GGUF files back: every written tensor compared with what was meant, through the plain parse of the format
in :mod:`headprune.loading.gguf_header` (``gguf.GGUFReader`` takes a minute over a 49k-token vocabulary; that parse
takes well under a second, so an export reads its whole file back before anything is written in place).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from headprune.errors import UnsupportedModelError
from headprune.loading.gguf_header import read_gguf


def place_at(path: Path, offset: int) -> str | None:
    """What byte ``offset`` of a GGUF file belongs to: ``its metadata KEY``, ``its tensor names`` or ``its tensor
    data``; None where the file does not parse as GGUF (a credential's place, named without its value)."""
    import struct

    spans: list = []
    try:
        _, _, start = read_gguf(path, spans=spans)
    except (OSError, ValueError, KeyError, IndexError, EOFError, struct.error, UnsupportedModelError):
        return None
    key = next((key for key, begin, end in spans if begin <= offset < end), None)
    if key is not None:
        return f"its metadata {key}"
    return "its tensor data" if offset >= start else "its tensor names" if spans and offset >= spans[-1][2] else None


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
