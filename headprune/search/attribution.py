"""One-pass screen: a first-order estimate of every head's ablation effect (attribution patching).

Each head's output ``x_h`` at the output-projection input is replaced by ``m_h + g_h (x_h - m_h)`` with a
gate ``g_h = 1`` (``m_h`` = 0 for zero ablation, the head's mean for mean ablation). Ablation is ``g_h = 0``,
so the change of the summed margin is estimated by ``-dM/dg_h`` from one forward and backward pass over
the discovery set. The estimate pre-selects candidates; find then scores those exactly.
"""

from __future__ import annotations

import torch
from torch import nn

from headprune.evaluation import Evaluator
from headprune.heads import Head


def estimate_effects(evaluator: Evaluator, *, means: torch.Tensor | None = None) -> dict[Head, float]:
    """Estimated change of the mean margin when each head is ablated alone (positive = helps the task)."""
    lm = evaluator.lm
    grid = lm.grid
    gates = torch.ones(grid.num_layers, grid.num_heads, requires_grad=True)  # float32, on the CPU

    def gate_hook(layer: int):  # noqa: ANN202
        def hook(module: nn.Module, args: tuple) -> tuple:
            x = args[0]
            per_head = x.view(*x.shape[:-1], grid.num_heads, grid.head_dim)  # (B, T, H, head_dim)
            base = means[layer].to(x) if means is not None else torch.zeros_like(per_head[0, 0])
            gated = base + gates[layer].to(x)[:, None] * (per_head - base)
            return (gated.reshape(x.shape), *args[1:])

        return hook

    handles = [lm.adapter.output_projection(lm.model, layer).register_forward_pre_hook(gate_hook(layer))
               for layer in range(grid.num_layers)]
    trainable = [p for p in lm.model.parameters() if p.requires_grad]
    for parameter in trainable:
        parameter.requires_grad_(False)  # gradients are needed for the gates only
    try:
        with torch.enable_grad():
            for total in evaluator.surrogate_margins():
                total.backward()
    finally:
        for handle in handles:
            handle.remove()
        for parameter in trainable:
            parameter.requires_grad_(True)
    effect = -gates.grad / len(evaluator.task)  # (L, H): first-order change of the mean margin
    return {Head(layer, head): float(effect[layer, head]) for layer in range(grid.num_layers)
            for head in range(grid.num_heads)}
