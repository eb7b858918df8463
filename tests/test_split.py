"""The discovery/held-out split: disjoint by input, and it counts what it drops."""

from __future__ import annotations


def test_the_split_is_disjoint_by_input_and_counts_what_it_drops() -> None:
    from headprune.search.split import split_task
    from headprune.tasks import Example, Task

    # 30 inputs, each asked twice with opposite answers, plus 5 exact duplicates.
    examples = [Example(f"a{i}", prompt=f"question {i}", choices=(" yes", " no"), answer=0) for i in range(30)]
    examples += [Example(f"b{i}", prompt=f"question {i}", choices=(" yes", " no"), answer=1) for i in range(30)]
    examples += [Example(f"c{i}", prompt=f"question {i}", choices=(" yes", " no"), answer=0) for i in range(5)]
    task = Task("conflicts", "choice", tuple(examples))
    for seed in range(5):
        split = split_task(task, discovery=15, heldout=15, seed=seed)
        inputs = [{e.prompt for e in side.examples} for side in (split.discovery, split.heldout)]
        assert not inputs[0] & inputs[1] and all(len(s) == 15 for s in inputs)
        assert (split.duplicates_dropped, split.conflicts_dropped) == (5, 30)
    # A second task with the same inputs (other answers) as held-out: those in discovery are dropped there.
    split = split_task(Task("d", "choice", tuple(examples[:30])), discovery=10, heldout=10, seed=0,
                       heldout_task=Task("h", "choice", tuple(examples[30:60]) + tuple(
                           Example(f"n{i}", prompt=f"new {i}", choices=(" yes", " no"), answer=0) for i in range(12))))
    assert not {e.prompt for e in split.discovery.examples} & {e.prompt for e in split.heldout.examples}
    assert split.conflicts_dropped == 10
