"""Quantized checkpoints written back as shipped: a safetensors export of an FP8 block-quantized or MXFP4 checkpoint
holds the checkpoint's own quantized bytes wherever the pruned tensor is made of them, so it keeps the quantization
and, dequantized, is exactly the masked original the search and the verification ran on.

``save_pretrained`` writes the pruned model dequantized, in the dtype it was loaded in (transformers drops the
quantization when it dequantizes); :func:`write_quantized` then replaces, file by file, each tensor the checkpoint
stored quantized:

- fp8: a tensor stays FP8 when each of its blocks (the checkpoint's: rows // scale rows by cols // scale cols, as
  transformers' dequantizer derives them) is a block of the checkpoint's tensor taken whole along the axis that was
  cut (q/k/v rows, o_proj columns), each line equal or zero (a head silenced in place: the dense layout, or a kept
  zeroed head). Its bytes are then that block's bytes, zeroed lines 0 (exact in float8_e4m3fn), with that block's
  scale. A head whose rows do not fill whole blocks (a head width that is no multiple of 128) breaks that: its
  projection is written unquantized, in the dtype loaded (the very values the search ran on), and named in
  ``modules_to_not_convert``, which transformers' FP8 quantizer honours. Nothing is re-quantized (that would lose
  precision the verification would then have to allow).
- mxfp4: the experts, which headprune never touches: the checkpoint's ``_blocks`` and ``_scales``, byte for byte,
  once the written tensor is checked to be the one transformers loaded from them.

Every FP8 tensor written is checked: dequantized by transformers' own op (``Fp8Dequantize``), it equals the pruned
tensor bit for bit, or it is written unquantized instead. The checkpoint's ``quantization_config`` goes back into
config.json. Formats other than safetensors hold the dequantized weights (:func:`dequantized`).
"""

from __future__ import annotations

import hashlib
import json
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from headprune.loading.models import LoadedModel


@dataclass(frozen=True)
class QuantizedExport:
    """How an export wrote a quantized checkpoint's quantized weights (the record's ``quantization``).

    Attributes:
        method: the checkpoint's ``quant_method`` (``fp8``, ``mxfp4``).
        title: how people name it.
        read_as: the dtype they were dequantized to for the search and the verification.
        weights: quantized weights in the checkpoint.
        unchanged: written as the checkpoint's bytes.
        sliced: written as whole blocks of the checkpoint's bytes (heads cut out).
        zeroed: written as the checkpoint's bytes with removed heads' entries 0 (heads silenced in place).
        unquantized: written in ``read_as`` (their modules in ``modules_to_not_convert``), and why.
    """

    method: str
    title: str
    read_as: str
    weights: int
    unchanged: int = 0
    sliced: int = 0
    zeroed: int = 0
    unquantized: tuple[str, ...] = ()
    why: str = ""

    def line(self) -> str:
        """One line for the CLI and the card."""
        kept = self.unchanged + self.sliced + self.zeroed
        if not kept and self.unquantized:
            return f"read {self.title}, dequantized to {self.read_as}; written in {self.read_as} ({self.why})"
        if not kept:
            return f"read {self.title}, dequantized to {self.read_as}; {self.why}"
        how = ", ".join(f"{count} {what}" for count, what in ((self.unchanged, "unchanged"), (
            self.sliced, "cut by whole blocks"), (self.zeroed, "with heads zeroed")) if count)
        line = (f"read {self.title}, dequantized to {self.read_as} for the verification; written in "
                f"{self.method} from the checkpoint's own bytes: {kept} of {self.weights} quantized weights ({how})")
        if self.unquantized:
            shown = ", ".join(self.unquantized[:3]) + (" ..." if len(self.unquantized) > 3 else "")
            line += f"; {len(self.unquantized)} written in {self.read_as} ({shown}: {self.why})"
        return line


@dataclass
class _Tally:
    counts: dict[str, int] = field(default_factory=lambda: {"unchanged": 0, "sliced": 0, "zeroed": 0})
    unquantized: list[str] = field(default_factory=list)
    why: set[str] = field(default_factory=set)  # why those were written unquantized


def dequantized(lm: LoadedModel, format_name: str) -> QuantizedExport | None:
    """The record of a format that holds the dequantized weights (ONNX, GGUF: their own types)."""
    q = lm.quantization
    return None if q is None else QuantizedExport(q.method, q.title, q.read_as, len(q.weights),
                                                  why=f"a {format_name} file holds the dequantized weights, in its own "
                                                  "tensor types")


def write_quantized(lm: LoadedModel, staging: Path) -> QuantizedExport | None:
    """Put the checkpoint's quantization back into the export ``save_pretrained`` wrote to ``staging``.

    Returns:
        What was written how (None: the checkpoint is not quantized).
    """
    from headprune.core.checkpoint_files import weight_map

    q = lm.quantization
    if q is None:
        return None
    if q.method not in _WRITERS:  # a plain checkpoint of the values loaded (transformers dropped the config)
        return QuantizedExport(q.method, q.title, q.read_as, len(q.weights), unquantized=q.weights, why=(
            f"headprune writes {q.title} checkpoints back unquantized; the export is a plain checkpoint"))
    if q.unpaired:  # tensors stored quantized that headprune cannot pair with their scales: all plain, no config
        return QuantizedExport(q.method, q.title, q.read_as, len(q.weights), unquantized=q.weights, why=(
            f"{len(q.unpaired)} of its quantized tensors ({q.unpaired[0]} ...) keep their scales under names "
            "headprune does not pair; the export is a plain checkpoint"))
    tally, where, source = _Tally(), weight_map(staging), weight_map(lm.folder)
    with ExitStack() as stack:
        handles: dict[str, Any] = {}

        def stored(names: tuple[str, ...]) -> dict[str, torch.Tensor]:
            from safetensors import safe_open

            for file in {source[name] for name in names} - set(handles):
                handles[file] = stack.enter_context(safe_open(lm.folder / file, framework="pt"))
            return {name: handles[source[name]].get_tensor(name) for name in names}

        for file in sorted(set(where.values())):
            _rewrite_file(staging, file, q, stored, tally)
    _write_config(staging, q.config, tally.unquantized)
    return QuantizedExport(q.method, q.title, q.read_as, len(q.weights), **tally.counts,
                           unquantized=tuple(tally.unquantized), why="; ".join(sorted(tally.why)))


def _rewrite_file(staging: Path, file: str, q: Any, stored: Any, tally: _Tally) -> None:
    """One weight file of the export, its quantized weights replaced by their checkpoint form where it holds."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    with safe_open(staging / file, framework="pt") as handle:
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
        metadata = handle.metadata() or {"format": "pt"}
    out: dict[str, torch.Tensor] = {}
    block = tuple(q.config.get("weight_block_size") or ()) or None
    for name, tensor in tensors.items():
        parts = q.parts.get(name)
        if parts is None:
            out[name] = tensor
            continue
        written = _WRITERS[q.method](tensor, stored(parts), block)
        if isinstance(written, str):
            out[name] = tensor
            tally.unquantized.append(name.removesuffix(".weight"))
            tally.why.add(written)
            continue
        kind, replacement = written
        tally.counts[kind] += 1
        out.update(replacement)
    save_file(out, staging / file, metadata=metadata)
    _index_names(staging, file, out)


def _index_names(staging: Path, file: str, tensors: dict) -> None:
    """A sharded export's index lists the file's new tensor names and the new total size."""
    index = staging / "model.safetensors.index.json"
    if not index.is_file():
        return
    data = json.loads(index.read_text(encoding="utf-8"))
    weights = {name: where for name, where in data["weight_map"].items() if where != file}
    weights.update({name: file for name in tensors})
    total = sum((staging / part).stat().st_size for part in set(weights.values()))
    index.write_text(json.dumps({"metadata": {**data.get("metadata", {}), "total_size": total},
                                 "weight_map": dict(sorted(weights.items()))}, indent=2) + "\n", encoding="utf-8")


def _write_config(staging: Path, quantization: dict, unquantized: list[str]) -> None:
    """The checkpoint's ``quantization_config`` back in config.json, the modules written unquantized added to
    ``modules_to_not_convert`` (transformers leaves those plain)."""
    path = staging / "config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    quantization = dict(quantization)
    if unquantized:
        quantization["modules_to_not_convert"] = sorted(
            set(quantization.get("modules_to_not_convert") or ()) | set(unquantized))
    config["quantization_config"] = quantization
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _mxfp4(tensor: torch.Tensor, stored: dict[str, torch.Tensor], block: object = None) -> tuple[str, dict] | str:
    """The checkpoint's blocks and scales where ``tensor`` is what transformers dequantized from them (its own op;
    exact in bfloat16 and float32: E2M1 values times powers of two)."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    blocks, scales = stored.values()
    if not _equal(convert_moe_packed_tensors(blocks, scales, dtype=tensor.dtype), tensor):
        return "they differ from what transformers loaded from the checkpoint"
    return "unchanged", stored


def _fp8(tensor: torch.Tensor, stored: dict[str, torch.Tensor], block: tuple[int, ...] | None
         ) -> tuple[str, dict] | str:
    """``tensor`` as the checkpoint's FP8 bytes and scales (see the module's docstring), or why not: it is not made
    of whole blocks of them (``block``: the config's ``weight_block_size``, which a cut block must be)."""
    import torch

    (weight, quantized), (scale_name, scales), *scalars = stored.items()
    if quantized.dtype != torch.float8_e4m3fn or quantized.dim() != 2 or tensor.dim() != 2:
        return "their weights are not 2-d float8_e4m3fn"
    rows, cols = quantized.shape
    grid = tuple(scales.shape[-2:]) if scales.dim() >= 2 else (1, 1)
    if rows % grid[0] or cols % grid[1]:
        return "their scales do not divide them into blocks"
    original = _dequantize(quantized, scales, tensor.dtype)
    if _equal(original, tensor):
        return "unchanged", stored
    if block is not None and (rows // grid[0], cols // grid[1]) != block:
        return "their blocks are not the config's weight_block_size"
    same = tensor.shape == original.shape
    axes = (1, 0) if same else (0,) if tensor.shape[1] == cols else (1,) if tensor.shape[0] == rows else ()
    for axis in axes:
        size = (rows // grid[0], cols // grid[1])[axis]
        chosen = _blocks_of(tensor, original, axis, size)
        if chosen is None:
            continue
        lines = torch.tensor([b * size + i for b in chosen for i in range(size)])
        raw = quantized.view(torch.uint8).index_select(axis, lines)  # float8 has few kernels: its bytes have all
        raw.movedim(axis, 0)[tensor.movedim(axis, 0).flatten(1).eq(0).all(1)] = 0  # the byte 0 is float8's +0
        blocks = raw.view(torch.float8_e4m3fn)
        block_scales = scales.index_select(axis, torch.tensor(chosen)) if scales.dim() >= 2 else scales
        if _equal(_dequantize(blocks, block_scales, tensor.dtype), tensor):
            kind = "zeroed" if same and chosen == list(range(len(chosen))) else "sliced"
            return kind, {weight: blocks, scale_name: block_scales.contiguous(), **dict(scalars)}
    return "their heads do not fill whole quantization blocks"


def _blocks_of(tensor: torch.Tensor, original: torch.Tensor, axis: int, size: int) -> list[int] | None:
    """For each block of ``size`` lines of ``tensor`` along ``axis``, the block of ``original`` it was taken from:
    line ``i`` of the block equal to that block's line ``i``, or zero (a silenced head). None where there is none."""
    lines, source = tensor.movedim(axis, 0), original.movedim(axis, 0)
    if lines.shape[0] % size:
        return None
    found: dict[bytes, list[int]] = {}
    for position in range(source.shape[0]):
        found.setdefault(_digest(source[position]), []).append(position)
    zero = lines.flatten(1).eq(0).all(1).tolist()
    chosen = []
    for block in range(lines.shape[0] // size):
        options: set[int] | None = None
        for offset in range(size):
            if zero[block * size + offset]:
                continue
            here = {p // size for p in found.get(_digest(lines[block * size + offset]), ()) if p % size == offset}
            options = here if options is None else options & here
            if not options:
                return None
        chosen.append(min(options) if options else min(block, source.shape[0] // size - 1))
    return chosen


def _digest(line: torch.Tensor) -> bytes:
    """A line's identity: a hash of its bytes (the final check compares the tensors themselves)."""
    import torch

    return hashlib.blake2b(line.contiguous().view(-1).view(torch.uint8).numpy().tobytes(), digest_size=16).digest()


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit (a NaN equals itself): same dtype, shape and bytes."""
    import torch

    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().view(-1).view(torch.uint8), b.contiguous().view(-1).view(torch.uint8))


def _dequantize(quantized: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """What transformers loads from FP8 bytes and scales into a ``dtype`` parameter: its own dequantizing op."""
    from transformers.integrations.finegrained_fp8 import Fp8Dequantize

    return Fp8Dequantize(None)._dequantize_one(quantized, scales, output_dtype=dtype)


# quant_method -> how a pruned tensor is written in the checkpoint's form (a method without one: a plain checkpoint).
_WRITERS = {"fp8": _fp8, "mxfp4": _mxfp4}
