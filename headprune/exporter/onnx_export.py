"""ONNX: export a (sliced) model's logits with dynamic batch and sequence, and run it with onnxruntime.

Causal LMs take ``input_ids, attention_mask, position_ids`` and return ``logits``; encoders take
``input_ids, attention_mask`` and return ``last_hidden_state``. Exported with torch's dynamo exporter.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

ONNX_NAME = "model.onnx"


class _CausalLogits(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          use_cache=False).logits


class _EncoderStates(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def export_onnx(model: nn.Module, path: Path, *, encoder: bool) -> None:
    """Write ``model`` as ONNX to ``path`` (weights embedded; dynamic batch and sequence axes)."""
    wrapper = (_EncoderStates(model) if encoder else _CausalLogits(model)).eval()  # a new wrapper is in train mode
    ids = torch.tensor([[5, 6, 7, 8, 9], [0, 0, 5, 6, 7]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence")
    names = ["input_ids", "attention_mask"] + ([] if encoder else ["position_ids"])
    args: tuple = (ids, mask) if encoder else (ids, mask, (mask.cumsum(-1) - 1).clamp(min=0))
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(wrapper, args, dynamo=True, input_names=names,
                                    output_names=["last_hidden_state" if encoder else "logits"],
                                    dynamic_shapes={name: {0: batch, 1: seq} for name in names}, verbose=False)
    program.save(str(path), external_data=False)


class OnnxModel:
    """An onnxruntime session that answers the calls headprune's evaluator makes of a model."""

    def __init__(self, path: Path, *, encoder: bool) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.encoder = encoder

    def __call__(self, *, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor | None
                 = None, logits_to_keep: int = 0, **_: object) -> SimpleNamespace:
        feeds = {"input_ids": input_ids.numpy().astype(np.int64), "attention_mask": attention_mask.numpy().astype(
            np.int64)}
        if not self.encoder:
            feeds["position_ids"] = position_ids.numpy().astype(np.int64)
        (output,) = self.session.run(None, feeds)
        tensor = torch.from_numpy(output)
        if self.encoder:
            return SimpleNamespace(last_hidden_state=tensor)
        return SimpleNamespace(logits=tensor[:, -logits_to_keep:] if logits_to_keep else tensor)
