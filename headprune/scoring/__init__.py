"""Scorers, one per task kind and kind of model, registered here.

A task kind is a registered spec (:mod:`headprune.tasks.kinds`: its rows, reader, writer, listing); its scorers
are one module each here, a :class:`Scorer` subclass per kind of model it runs on, and one entry in ``_SCORERS``
(keyed by the kind and the kind of model: two scorers for one pair are an error, and so is a scorer for a kind
no spec registers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from headprune.core.registry import Registry
from headprune.errors import TaskError
from headprune.loading.adapters import check_generates
from headprune.scoring.base import Item, Readout, Scorer, Tokens
from headprune.scoring.choice import ChoiceScorer
from headprune.scoring.classify import ClassifyScorer
from headprune.scoring.code import CodeScorer
from headprune.scoring.encoder_choice import EncoderChoiceScorer
from headprune.scoring.generate import GenerateScorer
from headprune.scoring.text import TextScorer
from headprune.tasks import Task
from headprune.tasks.kinds import kind_spec

if TYPE_CHECKING:  # pragma: no cover
    from headprune.loading.models import LoadedModel

_SCORERS: Registry[tuple[str, str], type[Scorer]] = Registry("scorer (task kind, model kind)", {
    (s.kind, s.models): s for s in (ChoiceScorer, GenerateScorer, TextScorer, EncoderChoiceScorer, ClassifyScorer,
                                   CodeScorer)})
for _kind, _ in _SCORERS:
    kind_spec(_kind)  # a scorer for a kind no spec registers fails at import (TaskError naming the kinds)
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
        UnsupportedModelError: the installed transformers cannot generate with this model type
            (``headprune.loading.adapters.check_generates``).
    """
    kind = model_kind(lm)
    if (task.kind, kind) in _SCORERS:
        scorer = _SCORERS[task.kind, kind](task, lm)
        if scorer.generates:
            check_generates(getattr(lm.model, "config", None))  # (a llama.cpp runtime has none to check)
        return scorer
    fits = " or ".join(_MODEL_WORDS[m] for m in sorted({models for k, models in _SCORERS if k == task.kind}))
    raise TaskError(f"{task.kind} tasks need {fits}; {lm.name} is {_MODEL_WORDS[kind]}")


__all__ = ["Item", "Readout", "Scorer", "Tokens", "model_kind", "scorer_for"]
