"""Tiny checkpoints quantized as the releases ship them, built in code: FP8 block-quantized (``quant_method: fp8``:
float8_e4m3fn weights with a float32 ``weight_scale_inv`` per 128 x 128 block, as DeepSeek-V3 and the Qwen FP8
releases store them) and MXFP4 experts (``quant_method: mxfp4``: GPT-OSS's ``*_blocks``/``*_scales``).

The quantizers here are the tests' own (the formats as their releases define them); what headprune and transformers
read back is checked against them, never assumed.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

BLOCK = 128
FP8_MAX = 448.0  # the largest float8_e4m3fn value
# The 16 values of an E2M1 nibble (low nibble first in a byte), as GPT-OSS stores them.
FP4_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


def fp8_blocks(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight`` (out, in) as float8_e4m3fn and its float32 ``weight_scale_inv`` (ceil(out/128), ceil(in/128)): each
    block divided by its largest |value| / 448."""
    rows, cols = weight.shape
    scales = torch.empty(-(-rows // BLOCK), -(-cols // BLOCK))
    quantized = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    for i in range(scales.shape[0]):
        for j in range(scales.shape[1]):
            block = weight[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK].float()
            scales[i, j] = block.abs().max().clamp(min=1e-12) / FP8_MAX
            quantized[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK] = (block / scales[i, j]).to(
                torch.float8_e4m3fn)
    return quantized, scales


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    with safe_open(folder / "model.safetensors", framework="pt") as handle:
        return {name: handle.get_tensor(name) for name in handle.keys()}


def _rewrite(folder: Path, tensors: dict[str, torch.Tensor], quantization: dict) -> Path:
    save_file({k: v.contiguous() for k, v in tensors.items()}, folder / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"], config["dtype"] = quantization, "bfloat16"  # as the releases declare
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def quantize_fp8(folder: Path, *, extra: dict[str, torch.Tensor] | None = None) -> Path:
    """The saved model in ``folder`` with every Linear weight of its layers FP8 block-quantized (embeddings, norms and
    the output head stay bfloat16, as the releases keep them), ``extra`` tensors added (e.g. a multi-token-prediction
    layer the class drops), and the ``quantization_config`` transformers reads."""
    out = {}
    for name, tensor in _tensors(folder).items():
        if name.startswith("model.layers.") and name.endswith("_proj.weight") and tensor.dim() == 2:
            out[name], out[name.removesuffix("weight") + "weight_scale_inv"] = fp8_blocks(tensor)
        else:
            out[name] = tensor.to(torch.bfloat16)
    out.update(extra or {})
    return _rewrite(folder, out, {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3",
                                  "weight_block_size": [BLOCK, BLOCK], "modules_to_not_convert": ["lm_head"]})


def mxfp4_pack(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """GPT-OSS's stacked expert weight (experts, in, out) as MXFP4: ``blocks`` (experts, out, in/32, 16) uint8, two
    E2M1 values a byte (low nibble first), and ``scales`` (experts, out, in/32) uint8 E8M0 exponents (127 = 2**0)."""
    rows = weight.transpose(1, 2).float()  # (experts, out, in): each output row in groups of 32 inputs
    groups = rows.reshape(*rows.shape[:2], -1, 32)
    exponent = torch.ceil(torch.log2(groups.abs().amax(-1, keepdim=True).clamp(min=1e-30) / 6.0))
    values = torch.tensor(FP4_VALUES)
    nearest = (groups / torch.exp2(exponent)).unsqueeze(-1).sub(values).abs().argmin(-1).to(torch.uint8)
    blocks = nearest[..., 0::2] | (nearest[..., 1::2] << 4)
    return blocks.contiguous(), (exponent.squeeze(-1) + 127).to(torch.uint8)


def quantize_mxfp4(folder: Path) -> Path:
    """The saved GPT-OSS model in ``folder`` with its experts' ``gate_up_proj`` and ``down_proj`` in MXFP4 (everything
    else bfloat16), and the ``quantization_config`` GPT-OSS ships."""
    out = {}
    for name, tensor in _tensors(folder).items():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            out[f"{name}_blocks"], out[f"{name}_scales"] = mxfp4_pack(tensor)
        else:
            out[name] = tensor.to(torch.bfloat16)
    return _rewrite(folder, out, {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]})


def quantize_compressed_fp8(folder: Path) -> Path:
    """The saved model in ``folder`` as llm-compressor's FP8-dynamic releases store it (compressed-tensors,
    ``float-quantized``): every Linear weight of its layers float8_e4m3fn with a bfloat16 ``weight_scale`` per output
    row (its largest |value| / 448), activations quantized per token at run time."""
    out = {}
    for name, tensor in _tensors(folder).items():
        if name.startswith("model.layers.") and name.endswith("_proj.weight") and tensor.dim() == 2:
            scale = (tensor.float().abs().amax(1, keepdim=True) / FP8_MAX).to(torch.bfloat16)
            out[name] = (tensor.float() / scale.float()).to(torch.float8_e4m3fn)
            out[name.removesuffix("weight") + "weight_scale"] = scale
        else:
            out[name] = tensor.to(torch.bfloat16)
    scheme = {"targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel",
                                                 "symmetric": True, "dynamic": False},
              "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "symmetric": True,
                                    "dynamic": True}}
    return _rewrite(folder, out, {"quant_method": "compressed-tensors", "format": "float-quantized",
                                  "quantization_status": "compressed", "ignore": ["lm_head"],
                                  "config_groups": {"group_0": scheme}})
