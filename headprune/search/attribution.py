"""One-pass screen: a first-order estimate of every head's ablation effect (attribution patching).

Each head's output ``x_h`` at the output-projection input is replaced by ``m_h + g_h (x_h - m_h)`` with a
gate ``g_h = 1`` (``m_h`` = 0 for zero ablation, the head's mean for mean ablation). Ablation is ``g_h = 0``,
so the change of the summed margin is estimated by ``-dM/dg_h`` from one forward and backward pass over
the discovery set. The estimate pre-selects candidates; find then scores those exactly. Taken with some heads'
gates at 0, it estimates what each other head adds once those are removed (the partner screen of ``--extend``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from headprune.evaluation import Evaluator
from headprune.heads import Head


def estimate_effects(evaluator: Evaluator, *, means: torch.Tensor | None = None,
                     ablated: Sequence[Head] = ()) -> dict[Head, float]:
    """Estimated change of the mean margin when each head is ablated (positive = helps the task): alone, or on top
    of the heads ``ablated``, whose gates are 0 for the whole pass (so the gradient is taken where they are
    removed: the first-order effect of adding each other head to them)."""
    lm = evaluator.lm
    grid = lm.grid
    start = torch.ones(grid.num_layers, grid.widest[0])  # float32, on the CPU (a layer with fewer heads: its first)
    for head in ablated:
        start[head.layer, head.head] = 0.0
    gates = start.requires_grad_(True)

    def gate_hook(layer: int):  # noqa: ANN202
        heads, width = grid.layers[layer].heads, grid.layers[layer].out_dim

        def hook(module: nn.Module, args: tuple) -> tuple:
            x = args[0]
            per_head = x.view(*x.shape[:-1], heads, width)  # (B, T, H, width)
            base = means[layer, :heads, :width].to(x) if means is not None else torch.zeros_like(per_head[0, 0])
            gated = base + gates[layer, :heads].to(x)[:, None] * (per_head - base)
            return (gated.reshape(x.shape), *args[1:])

        return hook

    handles = [lm.adapter.output_projection(lm.model, layer).register_forward_pre_hook(gate_hook(layer))
               for layer in range(grid.num_layers) if grid.layers[layer].heads]
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
            # A model dispatched by a device map reloads offloaded weights on the fly: one loaded during an
            # inference pass is an inference tensor, which cannot take requires_grad again (and needs none).
            if not parameter.is_inference():
                parameter.requires_grad_(True)
    effect = -gates.grad / len(evaluator.task)  # (L, H): first-order change of the mean margin
    return {head: float(effect[head.layer, head.head]) for head in grid.all_heads()}
