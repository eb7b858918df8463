"""What greedy decoding of one example gave, beyond its text: how near it came to writing something else.

A generate task's answer is decided by greedy decoding, not by the teacher-forced margin of the target: an
intact model can be a hair from another stop token or spacing while its target margin is far from zero, and
the other way round. So each greedy step's gap between the chosen token's score and the runner-up's is
recorded (:class:`StepGaps`, a logits processor that changes nothing), and an example's decision gap is the
smallest gap over the steps that decided its answer text: those up to the token that ends it (a stop string
reached, an end-of-sequence token), not the tokens decoded after it, which nothing reads. The determinism
check (``headprune.evaluation.contract``) exempts an example from answering the same in another batch order
only when this gap is within the precision's tolerance: two tokens that close may swap under float rounding.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Generated:
    """One example's greedy decoding: the answer part of the text, and the smallest top-1 minus top-2 score
    gap (log-prob units) over the steps that decided it (``inf`` when no step did)."""

    text: str
    gap: float


class StepGaps:
    """A logits processor that records, per step and row, the chosen token's score minus the runner-up's.

    It returns the scores unchanged, so decoding is exactly what it would be without it; it runs last, so the
    gap is on the scores greedy decoding chooses from (after any processor the model's generation config adds).
    """

    def __init__(self) -> None:
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        top = scores.float().topk(2, dim=-1).values  # (B, 2)
        self.steps.append(top[:, 0] - top[:, 1])  # stays on the device: one copy at the end, no sync per step
        return scores

    def stacked(self, rows: int) -> torch.Tensor:
        """``(rows, steps)`` gaps; ``(rows, 0)`` when nothing was recorded (nothing decoded, or a runtime standing
        in for a model, such as llama.cpp, whose ``generate`` runs no logits processor)."""
        return torch.stack(self.steps, dim=1).cpu() if self.steps else torch.zeros((rows, 0))


def eos_ids(model: object) -> set[int]:
    """The token ids that end a generation for ``model`` (its generation config's, possibly several)."""
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None)
    if eos is None:
        return set()
    return {int(eos)} if isinstance(eos, int) else {int(token) for token in eos}


def decided_steps(tokens: Sequence[int], eos: set[int], decode: Callable[[Sequence[int]], str],
                  ended: Callable[[str], bool]) -> int:
    """How many greedy steps decided the answer text: up to and including the step whose token ends it (a stop
    string reached, an end-of-sequence token), else all of them. Found by bisection on decoded prefixes (a stop
    string, once in the text, stays there), so a long generation costs a few decodes, not one per token."""
    limit = next((k + 1 for k, token in enumerate(tokens) if token in eos), len(tokens))

    def stopped(k: int) -> bool:
        return ended(decode(tokens[:k]))

    if limit == 0 or not stopped(limit):
        return limit
    low, high = 1, limit
    while low < high:
        middle = (low + high) // 2
        if stopped(middle):
            high = middle
        else:
            low = middle + 1
    return low


def decision_gap(gaps: torch.Tensor, decided: int) -> float:
    """The smallest of the first ``decided`` step gaps of one row (``inf`` when none was recorded)."""
    recorded = gaps[:decided]
    return float(recorded.min()) if recorded.numel() else float("inf")
