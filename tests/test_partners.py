"""Partners on a real model: a head whose removal changes no answer alone but rescues examples once the strong
head is removed reaches the joint search through the screen taken at the best set (``--extend``), and is kept by
its own test on the check half and held-out.

The hand-made model (``helpers.handmade``) with a second harmful head: L0.H0 writes the cue back negated at
strength 0.2, L0.H3 does the same at 0.1 (H1 and H2 write nothing). Their pushes add, so an example is rescued by
removing H0 alone where its deficit is below H0's push, and by removing both where it is below the sum. The task
keeps every example whose answer removing H3 alone leaves as it is (it drops those H3 alone would rescue), so H3
alone scores exactly as the heads that write nothing, and the screen cannot tell it from them: with one nominee the
joint search sees H0 alone.
"""

from __future__ import annotations

import pytest

from helpers.handmade import build_model, cue_task
from headprune.evaluation import Evaluator
from headprune.heads import parse_heads
from headprune.search.find import find
from headprune.tasks import Task

STRONG, PARTNER = "L0.H0", "L0.H3"
SEARCH = dict(discovery=300, heldout=250, nominees=1, max_heads=1, finalists=2, batch_size=128)


@pytest.fixture(scope="module")
def planted():  # noqa: ANN201
    """The model with its pair, the task (H3 alone changes no answer of it) and the correct answers per condition."""
    lm = build_model(passengers={3: 0.1})
    task = cue_task()
    evaluator = Evaluator(lm, task, batch_size=256)
    correct = {name: evaluator.run(parse_heads(heads) if heads else ()).correct
               for name, heads in (("intact", ""), ("strong", STRONG), ("partner", PARTNER),
                                   ("both", f"{STRONG},{PARTNER}"))}
    keep = correct["partner"] == correct["intact"]
    examples = tuple(e for e, k in zip(task.examples, keep) if k)
    return lm, Task("cue-pair", "choice", examples), {name: c[keep] for name, c in correct.items()}


def test_the_plant_is_a_pair_that_helps_together(planted) -> None:
    _, task, correct = planted
    assert len(task) >= 550  # discovery and held-out
    assert (correct["partner"] == correct["intact"]).all()  # the partner alone: no answer changes
    alone = int(correct["strong"].sum() - correct["intact"].sum())
    together = int(correct["both"].sum() - correct["intact"].sum())
    assert alone >= 40 and together >= alone + 20, (alone, together)  # the pair rescues far more than H0 alone


def test_the_screen_at_the_best_set_finds_the_partner_and_it_is_kept(planted, tmp_path) -> None:
    lm, task, _ = planted
    plain = find(lm, task, extend=0, out=tmp_path / "plain", **SEARCH)
    assert [str(h) for h in plain.primary] == [STRONG]  # the partner never reaches the joint search
    grown = find(lm, task, out=tmp_path / "grown", **SEARCH)  # --extend 1, the default
    assert [str(h) for h in grown.primary] == [STRONG, PARTNER] and grown.confirmed
    assert grown.selection.proposal == (STRONG, PARTNER) and grown.selection.kept == (STRONG, PARTNER)
    tested = {c.head: c for c in grown.selection.contributions}  # each head against the set without it
    assert tested[PARTNER].earned and tested[PARTNER].damaged == 0 and tested[PARTNER].rescued >= 5
    assert grown.verdict.difference > plain.verdict.difference
