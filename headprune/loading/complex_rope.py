"""RoPE that transformers computes in complex numbers (Llama 4's, DeepSeek-V2's: ``torch.polar`` for the frequencies,
``apply_rotary_emb`` multiplying each adjacent pair of a head by ``cos + i sin``), computed in real numbers while
torch's ONNX exporter, which takes no complex tensors, traces a model: a family's ``Family.traceable``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import ModuleType
from typing import Any


def _rotary(self: Any, x: Any, position_ids: Any) -> Any:
    """The rotary embedding's forward with cos and sin stacked in place of ``polar``: (B, T, D/2, 2)."""
    import torch

    freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)  # (B, T, D/2)
    return torch.stack((freqs.cos(), freqs.sin()), dim=-1) * self.attention_scaling


def _rotate(heads_axis: int) -> Callable[[Any, Any, Any], tuple[Any, Any]]:
    """``apply_rotary_emb`` on real numbers for queries and keys whose heads are on ``heads_axis`` (2 for
    (B, T, H, D), 1 for (B, H, T, D)): each adjacent pair (a, b) of a head's rotary part times cos + i sin."""

    def rotate(xq: Any, xk: Any, freqs: Any) -> tuple[Any, Any]:
        import torch

        cos, sin = freqs[..., 0].unsqueeze(heads_axis), freqs[..., 1].unsqueeze(heads_axis)

        def turn(x: Any) -> Any:
            pairs = x.float().reshape(*x.shape[:-1], -1, 2)
            a, b = pairs[..., 0], pairs[..., 1]
            return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(3).type_as(x)

        return turn(xq), turn(xk)

    return rotate


def real_rope(modeling: Callable[[], ModuleType], rotary_class: str,
              heads_axis: int) -> Callable[[Any], AbstractContextManager[None]]:
    """A ``Family.traceable``: within it, every ``rotary_class`` module of the model and ``modeling``'s (a function
    importing transformers' modeling module, so that family files import no torch) ``apply_rotary_emb`` compute in
    real numbers; restored afterwards.

    Args:
        modeling: returns the modeling module that defines ``rotary_class`` and ``apply_rotary_emb``.
        rotary_class: the rotary embedding's class name in it.
        heads_axis: the axis of the heads in the queries and keys ``apply_rotary_emb`` takes.

    Returns:
        ``model -> context manager``.
    """

    @contextmanager
    def traced(model: Any) -> Iterator[None]:
        module = modeling()
        rotaries = [m for m in model.modules() if isinstance(m, getattr(module, rotary_class))]
        apply = module.apply_rotary_emb
        try:
            for rotary in rotaries:
                rotary.forward = _rotary.__get__(rotary)
            module.apply_rotary_emb = _rotate(heads_axis)
            yield
        finally:
            module.apply_rotary_emb = apply
            for rotary in rotaries:
                del rotary.forward

    return traced


__all__ = ["real_rope"]
