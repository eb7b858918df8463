"""A Gated DeltaNet's recurrence as one scan over the tokens, which torch's ONNX exporter writes as an ONNX ``Scan``
(a graph of any length), for a family's ``Family.traceable``.

Transformers computes a Gated DeltaNet (Qwen3.5's ``linear_attention`` layers) by chunks or token by token in Python
loops, which the exporter unrolls for the length it traced. Within :func:`scanned_delta_rule`, both of the modeling
module's rules are replaced by the token-by-token recurrence of ``torch_recurrent_gated_delta_rule`` (the same sums:
decay the state, add the key's delta, read it with the query), written with torch's ``scan``; the export's gate
compares the graph with the model as transformers computes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import ModuleType
from typing import Any

import torch

RULES = ("torch_chunk_gated_delta_rule", "torch_recurrent_gated_delta_rule")


def _l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)  # (transformers' l2norm)


def _step(state: torch.Tensor, token: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """One token: its query, key, value, decay and write strength ``(batch, heads, ...)``."""
    query, key, value, decay, beta = token
    state = state * decay.exp()[..., None, None]
    delta = (value - (state * key.unsqueeze(-1)).sum(dim=-2)) * beta.unsqueeze(-1)
    state = state + key.unsqueeze(-1) * delta.unsqueeze(-2)
    return state, (state * query.unsqueeze(-1)).sum(dim=-2)


def scanned_rule(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                 initial_state: torch.Tensor | None = None, output_final_state: bool = False,
                 use_qk_l2norm_in_kernel: bool = False, **_: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Transformers' gated delta rule (its arguments: ``(batch, tokens, heads, ...)``), scanned over the tokens.

    Returns:
        ``(output (batch, tokens, value heads, value dim), the last state or None)``.
    """
    from torch._higher_order_ops.scan import scan  # (torch's scan operator, not yet public: torch.onnx writes it)

    dtype = query.dtype
    batch, _, key_heads, key_dim = key.shape
    value_heads, value_dim = value.shape[-2:]
    if key_heads != value_heads:  # each query/key head serves its group of value heads
        query = query.repeat_interleave(value_heads // key_heads, dim=2)
        key = key.repeat_interleave(value_heads // key_heads, dim=2)
    query, key, value, g, beta = (x.to(torch.float32) for x in (query, key, value, g, beta))
    if use_qk_l2norm_in_kernel:
        query, key = _l2norm(query), _l2norm(key)
    query = query / (query.shape[-1] ** 0.5)
    state = (torch.zeros(batch, value_heads, key_dim, value_dim, dtype=torch.float32) if initial_state is None
             else initial_state.to(torch.float32))
    final, out = scan(_step, state, [x.transpose(0, 1) for x in (query, key, value, g, beta)])  # tokens first
    return out.transpose(0, 1).contiguous().to(dtype), final if output_final_state else None


def scanned_delta_rule(modeling: Callable[[], ModuleType]) -> Callable[[Any], AbstractContextManager[None]]:
    """A ``Family.traceable``: within it, ``modeling``'s (a function importing transformers' modeling module) gated
    delta rules are :func:`scanned_rule`; restored afterwards."""

    @contextmanager
    def traced(model: Any) -> Iterator[None]:
        module = modeling()
        rules = {name: getattr(module, name) for name in RULES}
        try:
            for name in RULES:
                setattr(module, name, scanned_rule)
            yield
        finally:
            for name, rule in rules.items():
                setattr(module, name, rule)

    return traced


__all__ = ["scanned_delta_rule", "scanned_rule"]
