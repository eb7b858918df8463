"""``code``: greedy generation, then the program run against the example's tests (pass@1).

The program is the prompt plus the completion when the row names an ``entry_point`` (HumanEval: the prompt
is the function's signature and docstring, and the tests define ``check(candidate)``, called with it), and
the completion alone otherwise (MBPP: the prompt describes the function, the model writes all of it, and
the tests are ``assert`` lines). The completion ends before the first line that starts a new top-level
statement the function does not need (HumanEval's stop strings), or ``[DONE]`` / a code fence (MBPP's), and
greedy decoding stops there too (what follows a stop string cannot change the completion), as a harness passing
the stop strings to ``generate`` does; the generated text kept is the completion.
Correct: the program and its tests exit cleanly within the time limit (``headprune.scoring.execution``). A
program runs once per run: a condition that writes the same program as an earlier one gets that run's outcome
(most ablations leave most completions unchanged), so a program near its time limit cannot make two conditions
that wrote the same code differ.

Margin: as for ``generate``, when the row carries a reference solution (``solution``; HumanEval's
``canonical_solution``, MBPP's ``code``): the smallest, over its tokens under teacher forcing, of the
reference token's log-prob minus the best other token's. Without one: +1 when the tests pass, -1 when not.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from headprune.scoring.base import Item, Scorer
from headprune.scoring.execution import require_code_execution, run_program
from headprune.tasks import Example, Task

if TYPE_CHECKING:  # pragma: no cover
    from headprune.loading.models import LoadedModel

# Where a completion ends: HumanEval's stop strings (a function's body) and MBPP's (a whole program).
FUNCTION_STOPS = ("\nclass ", "\ndef ", "\n#", "\nif __name__", "\nprint(", "\nassert ")
PROGRAM_STOPS = ("[DONE]", "```", "\nassert ", "\nif __name__", "\n\n\n")


class CodeScorer(Scorer):
    kind = "code"
    generates = True

    def __init__(self, task: Task, lm: LoadedModel) -> None:
        require_code_execution(task.name)  # before anything is generated
        super().__init__(task, lm)
        self.outcomes: dict[bytes, bool] = {}  # whether each program run so far passed, by its source's digest

    def items(self, index: int, example: Example) -> list[Item]:
        if example.target:  # the reference solution, teacher-forced for the margin
            ctx, cont = self.tokens.context_and_continuation(example.prompt, example.target)
            return [Item(index, tuple(ctx + cont[:-1]), read=len(cont), scored=tuple(cont))]
        prompt = self.tokens.encode(example.prompt)
        return [Item(index, tuple(prompt), read=1, scored=(prompt[-1],))]

    def value(self, item: Item, out: torch.Tensor) -> torch.Tensor:
        target = torch.tensor(item.scored, device=out.device)[:, None]
        picked = out.gather(-1, target)[:, 0]  # (k,): position t predicts scored[t]
        rivals = out.scatter(-1, target, float("-inf")).max(-1).values
        return torch.stack([(picked - rivals).min(), picked.sum()])  # (margin, reference log-prob)

    def generation_prompt(self, item: Item) -> tuple[int, ...]:
        if self.task.examples[item.example].target:
            return item.tokens[: len(item.tokens) - (item.read - 1)]
        return item.tokens

    def _stops(self, example: Example) -> tuple[str, ...]:
        return self.task.until or (FUNCTION_STOPS if example.entry_point else PROGRAM_STOPS)

    def stop(self, text: str, example: Example) -> str:
        return completion(text, self._stops(example))

    def ended(self, text: str, example: Example) -> bool:
        body = _unfenced(text)
        return any(marker in body for marker in self._stops(example))

    def judge(self, example: Example, values: list[torch.Tensor], generated: str | None) -> tuple[bool, float]:
        source = program(example, self.stop(generated or "", example))
        key = hashlib.sha256(source.encode()).digest()
        if key not in self.outcomes:
            self.outcomes[key] = run_program(source).passed
        passed = self.outcomes[key]
        margin = float(values[0][0]) if example.target else (1.0 if passed else -1.0)
        return passed, margin

    def surrogate(self, item: Item, value: torch.Tensor, example: Example) -> torch.Tensor:
        return value[1] if example.target else value[1] * 0.0


def completion(text: str, stops: Sequence[str]) -> str:
    """The completion in greedy's ``text``: after a leading code fence's first line (it names the language), up
    to the first of ``stops``."""
    kept = _unfenced(text)
    for marker in stops:
        kept = kept.split(marker, 1)[0]
    return kept


def _unfenced(text: str) -> str:
    """``text`` without a leading code fence's first line (which names the language); all of it without one."""
    if text.lstrip().startswith("```"):
        return text.lstrip().partition("\n")[2]
    return text


def program(example: Example, completion: str) -> str:
    """The source run for one example: the function (the prompt's head plus the completion, or the
    completion alone), its tests, and ``check(entry_point)`` for HumanEval-style tests."""
    body = example.prompt + completion if example.entry_point else completion
    source = f"{body}\n\n{example.tests}\n"
    if example.entry_point:
        source += f"\ncheck({example.entry_point})\n"
    return source
