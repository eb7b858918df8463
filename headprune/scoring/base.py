"""What a scorer is: how one task kind turns examples into model inputs, and model outputs into results.

The evaluator owns everything that does not depend on the kind (tokenised batches, padding, the shared
prompt prefix, the layer cache, ablation, greedy decoding); a scorer owns everything that does:

1. :meth:`Scorer.items`: the sequences to run for one example (:class:`Item`: input tokens, and for causal
   language models which final positions are read and which tokens are scored there).
2. :meth:`Scorer.value`: one item's slice of the forward pass's output reduced to a small tensor (a
   log-likelihood, a row of choice log-probs, an embedding, class logits). Differentiable.
3. :meth:`Scorer.judge`: an example's item values (and, for generating kinds, the greedy text) to
   ``(correct, margin)``; the margin is higher-is-better and positive when the answer is right.
4. :meth:`Scorer.surrogate`: one item's differentiable contribution to a sum of margin-like scores, for the
   attribution screen. Contributions must add up over items, because an example's items may fall in
   different batches.

The readout says what the evaluator hands to :meth:`value` per item:
    ``logprobs``  causal LM: log-softmax ``(read, V)`` at the item's last ``read`` positions (float32).
    ``pooled``    encoder: the mean of the last hidden states over real tokens, ``(D,)``.
    ``logits``    a model with its own task head (classification): that head's output row, ``(C,)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Literal

import torch

from headprune.errors import TaskError
from headprune.tasks import Example, Task

if TYPE_CHECKING:  # pragma: no cover
    from headprune.loading.models import LoadedModel

Readout = Literal["logprobs", "pooled", "logits"]


@dataclass(frozen=True)
class Item:
    """One sequence to run.

    Attributes:
        example: index of the example it belongs to.
        tokens: the model input.
        read: causal readouts: how many final positions of ``tokens`` are read.
        scored: causal readouts: the tokens whose log-probs the scorer reads at those positions.
        slot: which part of the example (a choice index), or -1 when the item covers all of it.
        type_ids: segment ids for encoders given text pairs (``None``: the model's default).
    """

    example: int
    tokens: tuple[int, ...]
    read: int = 0
    scored: tuple[int, ...] = ()
    slot: int = -1
    type_ids: tuple[int, ...] | None = None


class Tokens:
    """Tokenisation conventions shared by the scorers (those of lm-evaluation-harness)."""

    def __init__(self, tokenizer: object) -> None:
        self.tokenizer = tokenizer

    def encode(self, text: str, special: bool = True) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=special)["input_ids"])  # type: ignore[operator]

    def context_and_continuation(self, context: str, continuation: str, *, whitespace: bool = False
                                 ) -> tuple[list[int], list[int]]:
        """Trailing spaces of the context (all trailing whitespace with ``whitespace``, as
        lm-evaluation-harness does) belong to the continuation, and the continuation's tokens are those of
        the whole string after the context's own tokens."""
        stripped = context.rstrip() if whitespace else context.rstrip(" ")
        continuation = context[len(stripped):] + continuation
        context_tokens = self.encode(stripped)
        whole = self.encode(stripped + continuation)
        continuation_tokens = whole[len(context_tokens):]
        if not continuation_tokens:
            raise TaskError(f"continuation {continuation!r} has no tokens after its prompt")
        return context_tokens, continuation_tokens

    def prompt_and_continuation(self, prompt: str, continuation: str) -> tuple[list[int], list[int]]:
        """The prompt's own tokens, all of them, and the continuation's after them: those of the whole string
        when it starts with the prompt's tokens, else the continuation's own."""
        context_tokens = self.encode(prompt)
        whole = self.encode(prompt + continuation)
        if whole[: len(context_tokens)] == context_tokens and len(whole) > len(context_tokens):
            return context_tokens, whole[len(context_tokens):]
        continuation_tokens = self.encode(continuation, special=False)
        if not continuation_tokens:
            raise TaskError(f"continuation {continuation!r} has no tokens after its prompt")
        return context_tokens, continuation_tokens

    def decode(self, tokens: Sequence[int]) -> str:
        return self.tokenizer.decode(list(tokens), skip_special_tokens=True)  # type: ignore[attr-defined]


class Scorer(ABC):
    """Scores one task kind on one kind of model. Subclasses are registered in ``headprune.scoring``.

    Class attributes:
        kind: the task kind it scores.
        models: which models it scores: ``causal`` (a language-model head), ``encoder`` (hidden states)
            or ``classifier`` (a model whose own head classifies).
        readout: what the evaluator hands to :meth:`value` (see the module docstring).
        generates: whether correctness comes from greedy decoding of :meth:`generation_prompt`.
    """

    kind: ClassVar[str]
    models: ClassVar[str] = "causal"
    readout: ClassVar[Readout] = "logprobs"
    generates: ClassVar[bool] = False

    def __init__(self, task: Task, lm: LoadedModel) -> None:
        self.task = task
        self.lm = lm
        self.tokens = Tokens(lm.tokenizer)

    @abstractmethod
    def items(self, index: int, example: Example) -> list[Item]:
        """The sequences to run for ``example`` (the ``index``-th of the task)."""

    @abstractmethod
    def value(self, item: Item, out: torch.Tensor) -> torch.Tensor:
        """Reduce an item's readout to what :meth:`judge` needs."""

    @abstractmethod
    def judge(self, example: Example, values: list[torch.Tensor], generated: str | None) -> tuple[bool | None,
                                                                                                   float]:
        """``(correct, margin)`` of an example from its items' values (in item order)."""

    def surrogate(self, item: Item, value: torch.Tensor, example: Example) -> torch.Tensor:
        """This item's differentiable share of the summed margin-like score (attribution screen)."""
        raise TaskError(f"the attribution screen does not support {self.kind} tasks on this model; "
                        "use the exact screen")

    def generation_prompt(self, item: Item) -> tuple[int, ...]:
        """Generating kinds: the prompt tokens greedy decoding starts from."""
        raise NotImplementedError

    def stop(self, text: str, example: Example) -> str:
        """Generating kinds: the part of the decoded text that is ``example``'s answer: up to the first of the
        task's ``until`` strings, or the first newline."""
        for marker in self.task.until or ("\n",):
            text = text.split(marker, 1)[0]
        return text

    def ended(self, text: str, example: Example) -> bool:
        """Generating kinds: whether greedy's ``text`` already holds all of ``example``'s answer (a stop reached;
        once in the text, it stays there, whatever greedy writes next)."""
        return self.stop(text, example) != text


def rest_max(values: torch.Tensor, index: int) -> torch.Tensor:
    """The largest entry of a 1-d tensor other than ``values[index]``."""
    return torch.cat([values[:index], values[index + 1:]]).max()
