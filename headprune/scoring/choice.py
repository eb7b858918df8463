"""``choice`` on causal language models: the continuation with the highest log-likelihood wins.

Each choice is scored by the summed log-probability of its tokens after the prompt; with ``length_normalize``
divided by its length in the task's ``length_unit``: UTF-8 bytes (lm-evaluation-harness's ``acc_bytes``) or
characters (its ``acc_norm``). When every choice is a single
token after the same context, one sequence scores them all (the log-probs at its last position).
Margin: the right choice's score minus the best wrong one's.
"""

from __future__ import annotations

import torch

from headprune.scoring.base import Item, Scorer, rest_max
from headprune.tasks import Example


class ChoiceScorer(Scorer):
    kind = "choice"

    def items(self, index: int, example: Example) -> list[Item]:
        whitespace = self.task.strip_context == "whitespace"
        pairs = [self.tokens.context_and_continuation(example.prompt, choice, whitespace=whitespace)
                 for choice in example.choices]
        if all(len(cont) == 1 and ctx == pairs[0][0] for ctx, cont in pairs):
            # Every choice is one token after the same context: one forward scores them all.
            return [Item(index, tuple(pairs[0][0]), read=1, scored=tuple(cont[0] for _, cont in pairs))]
        return [Item(index, tuple(ctx + cont[:-1]), read=len(cont), scored=tuple(cont), slot=k)
                for k, (ctx, cont) in enumerate(pairs)]

    def value(self, item: Item, out: torch.Tensor) -> torch.Tensor:
        if item.slot < 0:
            return out[-1, list(item.scored)]  # (choices,): log-prob of each one-token choice
        picked = out.gather(-1, torch.tensor(item.scored, device=out.device)[:, None])[:, 0]  # position t: scored[t]
        return picked.sum()

    def _scores(self, example: Example, values: list[torch.Tensor]) -> torch.Tensor:
        scores = (values[0] if len(values) == 1 else torch.stack(values)).double()  # (choices,)
        if self.task.length_normalize:
            lengths = [len(c) if self.task.length_unit == "chars" else len(c.encode("utf-8")) for c in example.choices]
            scores = scores / torch.tensor(lengths, dtype=scores.dtype, device=scores.device)
        return scores

    def judge(self, example: Example, values: list[torch.Tensor], generated: str | None) -> tuple[bool, float]:
        scores = self._scores(example, values)
        return bool(int(scores.argmax()) == example.answer), float(scores[example.answer] - rest_max(scores,
                                                                                                       example.answer))

    def surrogate(self, item: Item, value: torch.Tensor, example: Example) -> torch.Tensor:
        if item.slot < 0:  # exactly the margin
            return value[example.answer] - rest_max(value, example.answer)
        # The right choice's log-likelihood minus the wrong ones' mean: additive over items.
        return value if item.slot == example.answer else -value / (len(example.choices) - 1)
