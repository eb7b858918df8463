"""Which heads carry which feature: direct logit attribution, independent of ``find``.

Each head's output at the query position is pushed through the final LayerNorm (with the scale of the whole
residual, frozen, the usual linearisation) and the unembedding, giving its contribution to
``logit(a) - logit(b)``. A head's **first-symbol score** is the mean of that contribution signed by the first
symbol (+1 for ``a``): how much the head answers "the first symbol". Its **last-symbol score** is the mean
signed by the *other* symbol than the last: how much it answers task B's rule. Both are measured on task-A
inputs, where first and last are independent, so the two features cannot borrow from each other.

The **conflict score** is what matters for task B: the mean contribution toward the first symbol on
*contradicting* inputs (first == last), where the first symbol is the wrong answer for B. A head can write
both features (LayerNorm lets a value map depend on position), so the conflict score is its net push the
wrong way; the fewest heads holding most (80%) of the positive conflict score carry the conflict.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from transformers import GPT2LMHeadModel

from headprune.synthetic.data import Row


@dataclass(frozen=True)
class HeadScores:
    """Per-head scores in logit units: first-symbol, last-symbol and conflict (see the module docstring)."""

    first: list[float]
    last: list[float]
    conflict: list[float]

    def conflict_heads(self, share: float = 0.8) -> list[int]:
        """Fewest heads that hold ``share`` of the positive conflict score, strongest first."""
        positive = np.clip(np.array(self.conflict), 0.0, None)
        chosen: list[int] = []
        for head in np.argsort(-positive, kind="stable"):
            if positive[head] <= 0 or self.conflict_share(chosen) >= share:
                break
            chosen.append(int(head))
        return chosen

    def conflict_share(self, heads: list[int]) -> float:
        """Share of the positive conflict score that ``heads`` hold."""
        positive = np.clip(np.array(self.conflict), 0.0, None)
        return float(positive[heads].sum() / positive.sum()) if positive.sum() > 0 else 0.0


@torch.no_grad()
def head_contributions(model: GPT2LMHeadModel, input_ids: torch.Tensor, answer_ids: tuple[int, int]
                       ) -> torch.Tensor:
    """Each head's direct contribution to ``logit(a) - logit(b)`` at the last position: (examples, heads).

    ``input_ids`` must be unpadded rows of equal length (every synthetic input has the same shape);
    ``answer_ids`` are the token ids of ``a`` and ``b``.
    """
    block = model.transformer.h[0]
    heads, head_dim = model.config.n_head, model.config.n_embd // model.config.n_head
    captured: dict[str, torch.Tensor] = {}

    def keep(name: str):  # noqa: ANN202
        def hook(_module: torch.nn.Module, args: tuple) -> None:
            captured[name] = args[0][:, -1].detach()

        return hook

    handles = [block.attn.c_proj.register_forward_pre_hook(keep("z")),
               model.transformer.ln_f.register_forward_pre_hook(keep("residual"))]
    try:
        model(input_ids=input_ids)
    finally:
        for handle in handles:
            handle.remove()
    z = captured["z"].view(-1, heads, head_dim)  # (n, H, d): head outputs before the output projection
    weight = block.attn.c_proj.weight.view(heads, head_dim, -1)  # Conv1D weight (in, out) -> (H, d, D)
    written = torch.einsum("nhd,hdD->nhD", z, weight)  # (n, H, D): what each head adds to the residual
    ln = model.transformer.ln_f
    residual = captured["residual"]
    scale = torch.sqrt(residual.var(-1, unbiased=False) + ln.eps)  # (n,)
    centred = written - written.mean(-1, keepdim=True)
    unembed = model.lm_head.weight  # (V, D)
    a, b = answer_ids
    direction = ln.weight * (unembed[a] - unembed[b])  # (D,)
    return torch.einsum("nhD,D->nh", centred, direction) / scale[:, None]


def head_scores(model: GPT2LMHeadModel, input_ids: torch.Tensor, rows: list[Row], answer_ids: tuple[int, int]
                ) -> HeadScores:
    """Every head's scores on ``rows`` (all task-A inputs, equally likely) encoded as ``input_ids``."""
    contribution = head_contributions(model, input_ids, answer_ids)  # (n, H)
    first_sign = torch.tensor([1.0 if row.first == 0 else -1.0 for row in rows])[:, None]
    other_sign = torch.tensor([1.0 if row.last == 1 else -1.0 for row in rows])[:, None]  # "a" when last is "b"
    contradicting = torch.tensor([row.first == row.last for row in rows])
    return HeadScores(first=(contribution * first_sign).mean(0).tolist(),
                      last=(contribution * other_sign).mean(0).tolist(),
                      conflict=(contribution * first_sign)[contradicting].mean(0).tolist())
