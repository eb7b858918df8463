"""Generate tasks: find keeps what the model wrote (journal and result.json), reports teacher-forced accuracy
beside exact match, splits the rescued examples by what changed, and shows a few in report.md."""

from __future__ import annotations

import json
import random

import numpy as np

from headprune.evaluation import EvalResult, ExampleResult, evaluate
from headprune.heads import parse_heads
from headprune.report.markdown import render_markdown
from headprune.search.find import find
from headprune.search.find_result import FindResult
from headprune.search.generations import generated_set
from headprune.search.journal import JOURNAL_NAME
from headprune.tasks import Example, Task
from helpers import build_tiny

WORDS = "the film is a dull delight movie with nothing to say it and so on".split()


def planted_task(lm, n: int = 48) -> Task:  # noqa: ANN001
    """Random prompts whose targets are what the model writes with L0.H1 removed: removing it rescues."""
    rng = random.Random(0)
    prompts = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))) for _ in range(n)]
    draft = Task("planted", "generate", tuple(Example(f"p{i}", prompt=p, target="x") for i, p in enumerate(prompts)),
                 max_new_tokens=3)
    texts = evaluate(lm, draft, heads=parse_heads("L0.H1")).texts
    return Task("planted", "generate", tuple(Example(e.id, prompt=e.prompt, target=t.strip() or "none")
                                             for e, t in zip(draft.examples, texts)), max_new_tokens=3)


def test_find_keeps_the_texts_and_splits_the_rescued(tmp_path, tokenizer) -> None:
    lm = build_tiny("llama", tokenizer, seed=3)
    task = planted_task(lm)
    result = find(lm, task, out=tmp_path, discovery=24, heldout=24, nominees=2, max_heads=2, finalists=2,
                  batch_size=8)
    g = result.generations
    assert g is not None and g.answer == "line" and len(g.finalists) == len(result.finalists) == 2
    held = task.subset([int(i[1:]) for i in g.ids])
    intact = evaluate(lm, held)
    assert g.baseline.texts == intact.texts and g.targets == tuple(e.target for e in held.examples)
    assert g.baseline.exact_match == intact.accuracy == result.verdict.accuracy_before
    assert g.baseline.teacher_forced == float((intact.margins > 0).mean())
    for finalist, record in zip(result.finalists, g.finalists):
        after = evaluate(lm, held, heads=parse_heads(",".join(finalist.heads)))  # outside find, from scratch
        assert record.texts == after.texts and record.exact_match == finalist.heldout.accuracy_after
        rescued = ~intact.correct & after.correct
        assert (record.rescued_answer + record.rescued_after_answer + record.rescued_other) == rescued.sum() \
            == finalist.heldout.rescued
        assert record.rescued_answer == (rescued & (intact.margins <= 0) & (after.margins > 0)).sum()
    assert g.finalists[0].exact_match > g.baseline.exact_match  # the planted head is found
    # The journal holds every condition's texts; result.json round-trips them.
    entries = [json.loads(line) for line in (tmp_path / JOURNAL_NAME).read_text().splitlines()[1:]]
    assert all(len(e["texts"]) == len(e["margins"]) for e in entries if "margins" in e)
    assert FindResult.from_dict(json.loads(json.dumps(result.to_dict()))).generations == g
    report = render_markdown(result)
    assert "## What the model wrote (held-out)" in report and f"Primary set `{','.join(result.finalists[0].heads)}`. What changed:" in report
    assert f"| intact | {g.baseline.exact_match:.1%} | {g.baseline.teacher_forced:.1%} |" in report
    assert "| rescued | " in report


def _results(texts: list[str], correct: list[bool], margins: list[float]) -> EvalResult:
    return EvalResult("t", "generate", tuple(ExampleResult(f"e{i}", c, m, text=t, decision=1.0)
                                             for i, (t, c, m) in enumerate(zip(texts, correct, margins))))


def test_rescued_split_by_teacher_forcing() -> None:
    # Target 46 everywhere. e0: " 46." -> " 46": the answer's tokens were greedy's already (margin > 0 before),
    # only the period went. e1: " 12" -> " 46": the answer's tokens changed. e2: stays right. e3: right -> " 4"
    # with the target's tokens no longer greedy's (damaged in the answer). e4: " 46" -> " 46." (damaged after it).
    before = _results([" 46.", " 12", " 46", " 46", " 46"], [False, False, True, True, True], [2.0, -1.0, 3.0, 1.0, 2.0])
    after = _results([" 46", " 46", " 46", " 4", " 46."], [True, True, True, False, False], [2.5, 0.5, 3.0, -0.5, 2.0])
    s = generated_set(("L0.H1",), before, after)
    assert (s.rescued_answer, s.rescued_after_answer, s.rescued_other) == (1, 1, 0)
    assert (s.damaged_answer, s.damaged_after_answer, s.damaged_other) == (1, 1, 0)
    assert s.exact_match == 0.6 and s.teacher_forced == 0.8 and s.correct == "11100"


def test_a_result_without_texts_still_loads(tmp_path, tokenizer) -> None:
    from helpers import random_choice_task

    lm = build_tiny("llama", tokenizer, seed=3)
    result = find(lm, random_choice_task(40, seed=1), discovery=20, heldout=20, nominees=2, max_heads=2,
                  finalists=1, batch_size=8)
    assert result.generations is None  # a choice task generates nothing
    data = result.to_dict()
    data.pop("generations")  # a result.json written before texts were kept
    assert FindResult.from_dict(data) == result
    assert "What the model wrote" not in render_markdown(result)
    assert np.isfinite(result.verdict.p_value)
