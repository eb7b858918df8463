"""``text``: mean token negative log-likelihood of a text, a continuous control metric (no accuracy).

Margin: minus the mean NLL (higher is better); ``correct`` is ``None``.
"""

from __future__ import annotations

import torch

from headprune.errors import TaskError
from headprune.scoring.base import Item, Scorer
from headprune.tasks import Example


class TextScorer(Scorer):
    kind = "text"

    def items(self, index: int, example: Example) -> list[Item]:
        tokens = self.tokens.encode(example.text)
        if len(tokens) < 2:
            raise TaskError(f"example {example.id}: text needs at least two tokens")
        return [Item(index, tuple(tokens[:-1]), read=len(tokens) - 1, scored=tuple(tokens[1:]))]

    def value(self, item: Item, out: torch.Tensor) -> torch.Tensor:
        picked = out.gather(-1, torch.tensor(item.scored, device=out.device)[:, None])[:, 0]
        return picked.mean()  # minus the mean NLL

    def judge(self, example: Example, values: list[torch.Tensor], generated: str | None) -> tuple[None, float]:
        return None, float(values[0])

    def surrogate(self, item: Item, value: torch.Tensor, example: Example) -> torch.Tensor:
        return value
