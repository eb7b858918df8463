"""Scorers, one per task kind and kind of model, registered here.

Adding a task kind is one module with a :class:`Scorer` subclass and one line in ``_SCORERS`` (keyed by the
kind and the kind of model it runs on: two scorers for one pair are an error).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headprune.core.registry import Registry
from headprune.errors import TaskError
from headprune.scoring.base import Item, Readout, Scorer, Tokens
from headprune.scoring.choice import ChoiceScorer
from headprune.scoring.classify import ClassifyScorer
from headprune.scoring.code import CodeScorer
from headprune.scoring.encoder_choice import EncoderChoiceScorer
from headprune.scoring.generate import GenerateScorer
from headprune.scoring.text import TextScorer
from headprune.tasks import Task

if TYPE_CHECKING:  # pragma: no cover
    from headprune.loading.models import LoadedModel

_SCORERS: Registry[tuple[str, str], type[Scorer]] = Registry("scorer (task kind, model kind)", {
    (s.kind, s.models): s for s in (ChoiceScorer, GenerateScorer, TextScorer, EncoderChoiceScorer, ClassifyScorer,
                                   CodeScorer)})
_MODEL_WORDS = {"causal": "a causal language model", "encoder": "an encoder (or a model read by its hidden states)",
                "classifier": "a model with a sequence-classification head"}


def model_kind(lm: LoadedModel) -> str:
    """Which scorers can run on the model: ``causal`` (a language-model head), ``classifier`` (a
    sequence-classification head) or ``encoder`` (anything else, read by its last hidden states)."""
    return {"causal-lm": "causal", "sequence-classification": "classifier"}.get(lm.task_head, "encoder")


def scorer_for(task: Task, lm: LoadedModel) -> Scorer:
    """The scorer for ``task`` on ``lm``.

    Raises:
        TaskError: no scorer handles this kind of task on this kind of model (naming what would).
    """
    kind = model_kind(lm)
    if (task.kind, kind) in _SCORERS:
        return _SCORERS[task.kind, kind](task, lm)
    fits = " or ".join(_MODEL_WORDS[m] for m in sorted({models for k, models in _SCORERS if k == task.kind}))
    raise TaskError(f"{task.kind} tasks need {fits}; {lm.name} is {_MODEL_WORDS[kind]}")


__all__ = ["Item", "Readout", "Scorer", "Tokens", "model_kind", "scorer_for"]
