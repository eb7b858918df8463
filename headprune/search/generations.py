"""Generate tasks: what the model wrote, kept so that a gain says what changed.

Exact match on a generated line can rise because the model *stops* differently (an intact model that writes
" 46." or runs on past the answer is wrong under the ``line`` rule), not because it computes better. So find
keeps every held-out text of the intact model and of each finalist (they are decoded anyway; the journal holds
them), the teacher-forced accuracy beside exact match (the target's tokens all greedy's choice: the margin
> 0 already computed), and splits a finalist's rescued (and damaged) examples by whether the target's tokens
changed under teacher forcing or only what was written after them. ``report.md`` shows a few examples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from headprune.evaluation import EvalResult
from headprune.heads import parse_heads
from headprune.tasks import Task


@dataclass(frozen=True)
class GeneratedSet:
    """Held-out generations of one condition (the intact model, or a finalist's set removed).

    ``exact_match`` is the task's accuracy (its answer rule on the generated text); ``teacher_forced`` the share of
    examples whose target tokens are all greedy's choice when the target is fed in (margin > 0), whatever is
    written after them. A finalist's rescued examples are split by what changed: ``rescued_answer``, the target's
    tokens became greedy's (teacher-forced wrong before, right after); ``rescued_after_answer``, greedy already
    wrote the target's tokens and only what it wrote after them changed (a stop, a space, a period).
    """

    heads: tuple[str, ...]
    texts: tuple[str, ...]
    correct: str  # per example, "1" right under the answer rule, "0" wrong (as the journal writes it)
    exact_match: float
    teacher_forced: float
    rescued_answer: int = 0
    rescued_after_answer: int = 0
    rescued_other: int = 0  # the target's tokens are greedy's neither before nor after (the rule read it elsewhere)
    damaged_answer: int = 0  # the target's tokens stopped being greedy's
    damaged_after_answer: int = 0  # still greedy's; what followed them changed
    damaged_other: int = 0


@dataclass(frozen=True)
class Generations:
    """Generate tasks: what the intact model and each finalist wrote on held-out, example by example."""

    answer: str  # the task's answer rule (``headprune.tasks.answers``)
    rule: str  # the rule in words
    ids: tuple[str, ...]
    prompts: tuple[str, ...]  # each prompt's last line (the question; few-shot lines are shared)
    targets: tuple[str, ...]
    baseline: GeneratedSet
    finalists: tuple[GeneratedSet, ...] = ()



def generated_set(heads: Sequence[str], base: EvalResult, after: EvalResult) -> GeneratedSet:
    """``after``'s texts and figures, its changes against ``base`` split by teacher-forced answer change."""
    before_ok, after_ok = base.correct, after.correct
    tf_before, tf_after = base.margins > 0, after.margins > 0
    rescued, damaged = ~before_ok & after_ok, before_ok & ~after_ok
    return GeneratedSet(
        tuple(heads), after.texts or (), "".join("1" if ok else "0" for ok in after_ok), float(after_ok.mean()),
        float(tf_after.mean()),
        rescued_answer=int((rescued & ~tf_before & tf_after).sum()),
        rescued_after_answer=int((rescued & tf_before & tf_after).sum()),
        rescued_other=int((rescued & ~tf_after).sum()),
        damaged_answer=int((damaged & tf_before & ~tf_after).sum()),
        damaged_after_answer=int((damaged & tf_before & tf_after).sum()),
        damaged_other=int((damaged & ~tf_before).sum()))


def generations(task: Task, base: EvalResult, finalists: Sequence[tuple[Sequence[str], EvalResult]]
                ) -> Generations | None:
    """The record for a generate task's held-out set (``None`` for other kinds, or a journal without texts)."""
    if task.kind != "generate" or base.texts is None or any(r.texts is None for _, r in finalists):
        return None
    return Generations(task.answer.name, task.answer.words(), tuple(e.id for e in task.examples),
                       tuple(_question(e.prompt) for e in task.examples), tuple(e.target for e in task.examples),
                       generated_set((), base, base),
                       tuple(generated_set(heads, base, after) for heads, after in finalists))


def heldout_generations(conditions, baseline: EvalResult, finalists: Sequence) -> Generations | None:  # noqa: ANN001
    """:func:`generations` for find's held-out set and finalists (``search.conditions.Conditions``; the finalists'
    held-out results are read back from the journal, nothing is evaluated again)."""
    task = conditions.evaluators["heldout"].task
    if task.kind != "generate":
        return None
    results = conditions.many("heldout", [parse_heads(f.heads) for f in finalists], "", quiet=True)
    return generations(task, baseline, [(f.heads, r) for f, r in zip(finalists, results)])


def _question(prompt: str) -> str:
    """A prompt's last non-empty line (what differs between few-shot prompts), at most 120 characters."""
    lines = [line for line in prompt.splitlines() if line.strip()] or [""]
    return lines[-1][-120:]


def transitions(base: GeneratedSet, after: GeneratedSet) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the examples ``after`` rescued (wrong to right) and damaged (right to wrong)."""
    before_ok = np.array([c == "1" for c in base.correct], dtype=bool)
    after_ok = np.array([c == "1" for c in after.correct], dtype=bool)
    return np.flatnonzero(~before_ok & after_ok), np.flatnonzero(before_ok & ~after_ok)
