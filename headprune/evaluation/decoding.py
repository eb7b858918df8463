"""What greedy decoding of one example gave, beyond its text: how near it came to writing something else.

A generate task's answer is decided by greedy decoding, not by the teacher-forced margin of the target: an
intact model can be a hair from another stop token or spacing while its target margin is far from zero, and
the other way round. So each greedy step's gap between the chosen token's score and the runner-up's is
recorded (:class:`StepGaps`, a logits processor that changes nothing), and an example's decision gap is the
smallest gap over the steps that decided its answer text: those up to the token that ends it (a stop string
reached, an end-of-sequence token), not the tokens decoded after it, which nothing reads. The determinism
check (``headprune.evaluation.contract``) exempts an example from answering the same in another batch order
only when this gap is within the precision's tolerance: two tokens that close may swap under float rounding.

Also here: whether a model's greedy decoding is the argmax of its logits (:func:`plain_greedy`), and a decoding
step's inputs with drafted tokens after each row's latest (:func:`with_drafts`), drafted by looking the text's
last tokens up where they came before (:func:`looked_up`).
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


# Generation-config settings under which greedy's next token is the argmax of the model's logits: any other
# value adds a logits processor (a penalty, a forced or suppressed token), and then only `generate` is exact.
_NEUTRAL: dict[str, tuple] = {
    "repetition_penalty": (None, 1.0), "encoder_repetition_penalty": (None, 1.0), "no_repeat_ngram_size": (None, 0),
    "encoder_no_repeat_ngram_size": (None, 0), "min_length": (None, 0), "min_new_tokens": (None, 0),
    "bad_words_ids": (None,), "suppress_tokens": (None,), "begin_suppress_tokens": (None,),
    "forced_bos_token_id": (None,), "forced_eos_token_id": (None,), "sequence_bias": (None,),
    "exponential_decay_length_penalty": (None,), "renormalize_logits": (None, False), "guidance_scale": (None, 1.0),
    "watermarking_config": (None,), "stop_strings": (None,), "logits_processor": (None,),
}


def plain_greedy(model: object) -> bool:
    """Whether greedy decoding of ``model`` is the argmax of its forward pass's logits at every step."""
    if not isinstance(model, torch.nn.Module):
        return False
    config = getattr(model, "generation_config", None)
    return all(getattr(config, name, None) in neutral for name, neutral in _NEUTRAL.items())


def with_drafts(ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, drafts: list[list[int]],
                 pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """A step's inputs with each row's ``drafts`` after its latest token (right-padded), and how many columns."""
    drafted = max(len(draft) for draft in drafts)
    if drafted:
        device = ids.device
        ids = torch.cat([ids, torch.tensor([d + [pad_id] * (drafted - len(d)) for d in drafts], device=device)], 1)
        filled = torch.tensor([[1] * len(d) + [0] * (drafted - len(d)) for d in drafts], device=device)
        mask = torch.cat([mask, filled.to(mask)], dim=1)
        positions = torch.cat([positions, positions[:, -1:] + 1 + torch.arange(drafted, device=device)], 1)
    return ids, mask, positions, drafted


LOOKUP_TOKENS = 3  # the longest run of a text's last tokens looked up for a draft (prompt lookup)


def looked_up(text: Sequence[int], other: Sequence[int], width: int) -> list[int]:
    """What followed the latest earlier occurrence of ``text``'s last tokens (3 of them, else 2, else 1) in
    ``text``, else in ``other``: at most ``width`` tokens a decoding step may check in parallel (drafting by prompt
    lookup; greedy keeps only those it chooses too)."""
    for n in range(min(LOOKUP_TOKENS, len(text) - 1), 0, -1):
        key = list(text[-n:])
        for source, last in ((text, len(text) - n - 1), (other, len(other) - n - 1)):
            for start in range(last, -1, -1):
                if source[start] == key[0] and list(source[start: start + n]) == key:
                    return list(source[start + n: start + n + width])
    return []
