"""``generate``: greedy decoding up to the first newline (or the task's stop strings); the answer the task's rule
reads out of it (``headprune.tasks.answers``: the whole line, its first number, a regex, an lm-eval filter) must
equal the target (after trimming, unless the task compares them as they are).

Margin: the smallest, over the target's tokens under teacher forcing, of the log-prob of the target token
minus the best other token: positive exactly when greedy decoding would emit the target tokens. The item runs
the whole target and is read one position further, at the token greedy writes after it: with it the evaluator
tells, without decoding, what greedy writes where it follows the target (``headprune.evaluation.generation``). The target
is scored as the model would write it: after one space when the prompt ends in a non-space character
(``"2 + 3 ="`` -> ``" 5"``), as is otherwise, and exactly as given when the task compares answers untrimmed.
"""

from __future__ import annotations

import torch

from headprune.scoring.base import Item, Scorer
from headprune.tasks import Example


class GenerateScorer(Scorer):
    kind = "generate"
    generates = True

    def items(self, index: int, example: Example) -> list[Item]:
        if self.task.strip_answers:
            sep = "" if not example.prompt or example.prompt[-1].isspace() else " "
            ctx, cont = self.tokens.context_and_continuation(example.prompt, sep + example.target.strip())
        else:  # compared as it is, so scored as it is, after the whole prompt (decoding starts there, as in lm-eval)
            ctx, cont = self.tokens.prompt_and_continuation(example.prompt, example.target)
        return [Item(index, tuple(ctx + cont), read=len(cont) + 1, scored=tuple(cont))]

    def value(self, item: Item, out: torch.Tensor) -> torch.Tensor:
        out = out[: len(item.scored)]  # the last row reads what follows the target: not part of the margin
        target = torch.tensor(item.scored, device=out.device)[:, None]
        picked = out.gather(-1, target)[:, 0]  # (k,): position t predicts scored[t]
        rivals = out.scatter(-1, target, float("-inf")).max(-1).values
        return torch.stack([(picked - rivals).min(), picked.sum()])  # (margin, target log-prob)

    def judge(self, example: Example, values: list[torch.Tensor], generated: str | None) -> tuple[bool, float]:
        correct = self.task.answer.correct(generated or "", example.target, trim=self.task.strip_answers,
                                           key=example.id)
        return correct, float(values[0][0])

    def surrogate(self, item: Item, value: torch.Tensor, example: Example) -> torch.Tensor:
        return value[1]  # the target's log-prob: a smooth stand-in for the min-over-tokens margin

    def generation_prompt(self, item: Item) -> tuple[int, ...]:
        return item.tokens[: len(item.tokens) - (item.read - 1)]
