"""ONNX: export a (sliced) model's head output with dynamic batch and sequence, and run it with onnxruntime.

Decoders take ``input_ids, attention_mask, position_ids``, encoders ``input_ids, attention_mask``. The output
is the model's own head's (``logits``: a language-model, masked-LM or classification head), or
``last_hidden_state`` for a bare base model. Exported with torch's dynamo exporter.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
from torch import nn

from headprune.errors import UnsupportedModelError

ONNX_NAME = "model.onnx"
OUTPUTS = ("logits", "last_hidden_state")


def onnx_output(head: str) -> str:
    """The output an ONNX export of a model with this head carries.

    Raises:
        UnsupportedModelError: a head whose outputs are not one ``logits`` tensor (question answering, ...).
    """
    if head == "base":
        return "last_hidden_state"
    if head in ("causal-lm", "masked-lm", "sequence-classification", "token-classification"):
        return "logits"
    raise UnsupportedModelError(f"ONNX export supports models with a language-model, masked-LM or classification "
                                f"head, or none; this model has a {head} head (use format safetensors)")


class _Outputs(nn.Module):
    """The model's forward reduced to the exported inputs and one output."""

    def __init__(self, model: nn.Module, output: str) -> None:
        super().__init__()
        self.model, self.output = model, output

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        extra = {} if position_ids is None else {"position_ids": position_ids, "use_cache": False}
        return getattr(self.model(input_ids=input_ids, attention_mask=attention_mask, **extra), self.output)


def export_onnx(model: nn.Module, path: Path, *, output: str, positions: bool) -> None:
    """Write ``model`` as ONNX to ``path`` (weights embedded; dynamic batch and sequence axes).

    Args:
        output: ``logits`` or ``last_hidden_state`` (see :func:`onnx_output`).
        positions: the graph takes ``position_ids`` (decoders, which are padded on the left).
    """
    wrapper = _Outputs(model, output).eval()  # a new wrapper is in train mode
    ids = torch.tensor([[5, 6, 7, 8, 9], [0, 0, 5, 6, 7]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]])
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence")
    names = ["input_ids", "attention_mask"] + (["position_ids"] if positions else [])
    args: tuple = (ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)) if positions else (ids, mask)
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(wrapper, args, dynamo=True, input_names=names, output_names=[output],
                                    dynamic_shapes={name: {0: batch, 1: seq} for name in names}, verbose=False)
    program.save(str(path), external_data=False)


class OnnxModel:
    """An onnxruntime session that answers the calls headprune's evaluator and verifier make of a model."""

    def __init__(self, path: Path, *, output: str, positions: bool) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.output, self.positions = output, positions

    def __call__(self, *, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor | None
                 = None, logits_to_keep: int = 0, **_: object) -> SimpleNamespace:
        feeds = {"input_ids": input_ids.cpu().numpy().astype(np.int64),
                 "attention_mask": attention_mask.cpu().numpy().astype(np.int64)}
        if self.positions:
            feeds["position_ids"] = position_ids.cpu().numpy().astype(np.int64)
        (output,) = self.session.run(None, feeds)
        tensor = torch.from_numpy(output)
        if self.output == "logits" and logits_to_keep and tensor.dim() == 3:
            tensor = tensor[:, -logits_to_keep:]
        return SimpleNamespace(**{self.output: tensor})
