"""``choice`` on encoders: the choice whose embedding is closest to the prompt's wins.

The prompt and every choice are embedded separately (mean of the last hidden states over real tokens);
each choice is scored by its cosine similarity to the prompt. Margin: the right choice's similarity minus
the best wrong one's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from headprune.scoring.base import Item, Scorer, rest_max
from headprune.tasks import Example


class EncoderChoiceScorer(Scorer):
    kind = "choice"
    models = "encoder"
    readout = "pooled"

    def items(self, index: int, example: Example) -> list[Item]:
        prompt = Item(index, tuple(self.tokens.encode(example.prompt)))
        return [prompt] + [Item(index, tuple(self.tokens.encode(c)), slot=k) for k, c in enumerate(example.choices)]

    def value(self, item: Item, out: torch.Tensor) -> torch.Tensor:
        return out  # (D,) the embedding

    def judge(self, example: Example, values: list[torch.Tensor], generated: str | None) -> tuple[bool, float]:
        anchor, choices = values[0].double(), torch.stack(values[1:]).double()
        similarity = F.cosine_similarity(choices, anchor[None], dim=-1)  # (choices,)
        return bool(int(similarity.argmax()) == example.answer), float(
            similarity[example.answer] - rest_max(similarity, example.answer))
