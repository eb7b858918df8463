"""Quantized checkpoints as shipped, read: the quantization a checkpoint's config.json declares, the weights that
carry it, and the loading argument that has transformers dequantize them on every device.

headprune searches and cuts plain weights, so a quantized checkpoint is always read dequantized, by transformers'
own quantizer for it, asked to with its ``dequantize`` loading attribute (on a CPU it does so anyway, with a warning):

- ``fp8`` (FineGrainedFP8: DeepSeek-V3, Qwen3/3.5 FP8, GLM-4.5-FP8, Mistral FP8): float8_e4m3fn weights, each with a
  ``weight_scale_inv`` per block (128 x 128) -> ``fp8 x scale`` computed in float32 and rounded to the loaded dtype
  (``integrations.finegrained_fp8.Fp8Dequantize``).
- ``mxfp4`` (GPT-OSS, its experts only): ``*_blocks`` (two E2M1 values a byte) and ``*_scales`` (one E8M0 exponent
  per 32 values) -> exact in bfloat16 and float32 (``integrations.mxfp4.Mxfp4Dequantize``).
- ``compressed-tensors`` (llm-compressor's releases: FP8 per channel, int4/int8 packed, ...), with the optional
  ``headprune[compressed-tensors]`` (transformers reads it only with that package; named when missing, exit 2): its
  ``CompressedTensorsDequantize``. Left to itself it keeps the packed modules, which surgery cannot cut.

The weights run dequantized, without a checkpoint's activation quantization (which its own kernels would apply on
a GPU). Any other ``quant_method`` is refused in one line that names these. An export writes the same quantization
back where the format and the cut allow it (:mod:`headprune.exporter.quantized`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from headprune.errors import UnsupportedModelError

# quant_method -> how people name it, and transformers' config class that takes the ``dequantize`` loading attribute.
_METHODS: dict[str, tuple[str, str]] = {
    "fp8": ("FP8 block-quantized (fp8)", "FineGrainedFP8Config"),
    "mxfp4": ("MXFP4 (mxfp4)", "Mxfp4Config"),
    "compressed-tensors": ("compressed-tensors", "CompressedTensorsConfig"),
}
# The stored parts of a compressed-tensors weight (its formats' names, as transformers' quantizer lists them).
_COMPRESSED = (".weight_scale", ".weight_zero_point", ".weight_global_scale", ".weight_packed", ".weight_shape")
# Per-tensor scales an FP8 checkpoint may keep beside a weight (a static activation scheme): copied with it.
FP8_SCALARS = (".activation_scale", ".input_scale")


@dataclass(frozen=True)
class Quantization:
    """A checkpoint's quantization as shipped, and how headprune read it.

    Attributes:
        method: its ``quant_method`` (``fp8``, ``mxfp4``).
        config: its ``quantization_config`` as config.json gives it (an export writes it back).
        weights: the quantized weights, by the name the loaded model's tensor has in a saved file (fp8:
            ``...q_proj.weight``; mxfp4: ``...experts.gate_up_proj``).
        parts: for each of ``weights``, the names its parts are stored under in the checkpoint.
        unpaired: tensors stored in FP8 that are no part of those (scales under other names, e.g. ``.scale``, which
            transformers renames on load): an export cannot write them back, and writes a plain checkpoint.
        read_as: the dtype they were dequantized to (the loaded model's), once loaded.
    """

    method: str
    config: dict[str, Any] = field(compare=False)
    weights: tuple[str, ...]
    parts: dict[str, tuple[str, ...]] = field(compare=False, repr=False)
    unpaired: tuple[str, ...] = ()
    read_as: str = ""

    @property
    def title(self) -> str:
        return _METHODS[self.method][0]

    def line(self) -> str:
        """What the report, the CLI and the card say of how the model was read (one line)."""
        shown = ", ".join(self.weights[:2]) + (" ..." if len(self.weights) > 2 else "")
        return (f"read {self.title}: its {len(self.weights)} quantized weights ({shown}) dequantized to {self.read_as} "
                f"by transformers; the model ran in {self.read_as}")

    def loading_kwargs(self) -> dict[str, Any]:
        """``from_pretrained`` arguments that have transformers dequantize on any device (its own op), keeping the
        checkpoint's other loading attributes (the modules it left unquantized)."""
        import transformers

        config_class = getattr(transformers, _METHODS[self.method][1])
        kept = {"modules_to_not_convert": self.config["modules_to_not_convert"]} if self.config.get(
            "modules_to_not_convert") is not None and self.method == "fp8" else {}  # (fp8's loading attributes)
        return {"quantization_config": config_class(dequantize=True, **kept)}


def check_dequantized(model: Any, quantization: Quantization, spec: str) -> None:
    """Refuse a model transformers left quantized although asked to dequantize it (5.17 keeps compressed-tensors'
    ``weight_scale`` parameters on its modules): surgery cuts plain weights only.

    Raises:
        UnsupportedModelError: naming a quantization parameter the model kept.
    """
    import transformers

    kept = [name for name in model.state_dict() if name.endswith((*_COMPRESSED, *FP8_SCALARS, "_scale_inv",
                                                                   "_blocks", "_scales"))]
    if kept:
        raise UnsupportedModelError(
            f"{spec}: transformers {transformers.__version__} kept {quantization.title} quantization parameters on "
            f"the model when asked to dequantize it ({kept[0]}); headprune cuts plain weights: read it with a newer "
            "transformers (5.25, which scripts/setup.sh installs, dequantizes it)")


def read_quantization(folder: Path) -> Quantization | None:
    """The quantization config.json in ``folder`` declares (None: none), with the quantized weights among the
    checkpoint's tensors (read from the weight files' headers or index).

    Raises:
        UnsupportedModelError: a quantization headprune does not read, naming those it reads.
    """
    raw = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config = raw.get("quantization_config")
    if config is None:
        return None
    method = config.get("quant_method") if isinstance(config, dict) else None
    if method not in _METHODS:
        raise UnsupportedModelError(
            f"{folder}: config.json: quantization_config quant_method {method!r} is not read by headprune; it reads "
            f"unquantized checkpoints and {', '.join(title for title, _ in _METHODS.values())} ones, dequantized")
    if method == "compressed-tensors":
        from headprune.core.extras import require

        require("compressed-tensors", "reading a compressed-tensors checkpoint")
    from headprune.core.checkpoint_files import weight_map

    weights, parts = _quantized_parts(method, list(weight_map(folder)))
    paired = {name for stored in parts.values() for name in stored}
    return Quantization(method, config, weights, parts, _stored_fp8(folder, paired) if method == "fp8" else ())


def _stored_fp8(folder: Path, paired: set[str]) -> tuple[str, ...]:
    """The tensors of ``folder``'s safetensors files stored in an FP8 type, other than ``paired`` (headers only)."""
    from safetensors import safe_open

    found = []
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(path, framework="pt") as handle:
            found += [name for name in handle.keys() if name not in paired
                      and handle.get_slice(name).get_dtype().startswith("F8_")]
    return tuple(sorted(found))


def _quantized_parts(method: str, names: list[str]) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """(the quantized weights, by the name the loaded tensor is saved under; the stored names of each one's parts)."""
    present, parts = set(names), {}
    for name in names:
        if method == "fp8" and name.endswith(".weight_scale_inv") and name.removesuffix("_scale_inv") in present:
            stem = name.removesuffix(".weight_scale_inv")
            scalars = tuple(f"{stem}{suffix}" for suffix in FP8_SCALARS if f"{stem}{suffix}" in present)
            parts[f"{stem}.weight"] = (f"{stem}.weight", name, *scalars)
        elif method == "mxfp4" and name.endswith("_scales") and f"{name.removesuffix('_scales')}_blocks" in present:
            stem = name.removesuffix("_scales")  # the blocks are the weight: the loaded parameter is named so
            parts[stem] = (f"{stem}_blocks", name)
        elif method == "compressed-tensors" and name.endswith(".weight_scale"):
            stem = name.removesuffix(".weight_scale")
            parts[f"{stem}.weight"] = tuple(f"{stem}{suffix}" for suffix in (".weight", *_COMPRESSED)
                                            if f"{stem}{suffix}" in present)
    return tuple(sorted(parts)), parts


__all__ = ["Quantization", "check_dequantized", "read_quantization"]
