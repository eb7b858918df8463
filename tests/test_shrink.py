"""find --shrink: the improving set grown by whole key/value groups on discovery, tested against it for
non-inferiority on fresh examples, on the hand-made model (H0 harmful, sharing its key/value head with H1, which
writes nothing; H2 and H3 share the second) and through the counts-only growth and test."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from helpers import save_folder
from helpers.cli import assert_refused, invoke
from helpers.handmade import build_model, cue_task, random_label_task
from headprune.heads import Head, HeadGrid
from headprune.search.find import find
from headprune.search.fresh import fresh_examples
from headprune.search.growth import Budget
from headprune.search.paired import Paired
from headprune.search.shrink import data_note, fresh_verdict, grow_from, shrink_units
from headprune.search.split import split_task
from headprune.tasks import load_task, write_jsonl_task


@pytest.fixture(scope="module")
def grouped():  # noqa: ANN201
    return build_model(kv_heads=2)


def helper_of(lm, head: int, strength: float):  # noqa: ANN001, ANN201
    """``lm`` with query head ``head`` writing the cue back positively: removing it damages the task."""
    import copy

    lm = copy.copy(lm)
    lm.model = copy.deepcopy(lm.model)
    attn = lm.model.model.layers[0].self_attn
    with torch.no_grad():
        kv = head // 2
        attn.v_proj.weight[4 * kv + 1, 0] = 1.0  # the head's key/value group carries the cue in value dim 1
        attn.o_proj.weight[0, 4 * head + 1] = strength
    return lm


def test_the_improving_set_grows_by_groups_and_is_claimed_on_fresh_examples(grouped) -> None:
    result = find(grouped, cue_task(), discovery=300, heldout=300, batch_size=64, shrink=3)
    s = result.shrink
    assert result.confirmed and [str(h) for h in result.primary] == ["L0.H0"]
    assert s is not None and s.note is None and s.improving == ("L0.H0",)
    assert set(s.heads) > {"L0.H0"} and len(s.heads) < 4  # grown, and the layer keeps a head
    # Every unit is a whole group, or the rest of the group H0 is in: the grown set is whole groups.
    assert set(s.heads) in ({"L0.H0", "L0.H1"}, {"L0.H0", "L0.H2", "L0.H3"})
    assert s.fresh == 1000 - 600 and s.verdict.n == 400 and s.verdict.accepted  # H1..H3 write nothing
    assert (s.verdict.rescued, s.verdict.damaged) == (0, 0)
    assert s.original is not None and s.original < s.verdict.accuracy_before  # H0's removal helps on fresh too
    assert result.shrunk and result.confirmed  # the exit code's meaning is unchanged: P's verdict
    assert s.size.kv_heads == 1 and s.size.kv_heads_original == 2 and s.improving_size.kv_heads == 2
    assert s.size.kv_cache_bytes * 2 == s.size.kv_cache_bytes_original
    assert s.size.parameters < s.improving_size.parameters < s.size.parameters_original
    assert result.finalists[s.rank - 1].heads == s.heads


def test_a_group_the_task_needs_is_not_grown(grouped) -> None:
    lm = helper_of(grouped, 1, 0.1)  # H1, in H0's group, now helps the task: the rest of that group must stay
    result = find(lm, cue_task(), discovery=300, heldout=300, batch_size=64, shrink=3)
    s = result.shrink
    assert result.screen[1].head == "L0.H1" and result.screen[1].paired.damaged > 5
    assert s.rejected == ("L0.H1",) and s.heads == ("L0.H0", "L0.H2", "L0.H3")
    assert result.shrunk and s.size.kv_heads == 1  # the second group goes; H0's stays, for H1


def test_fresh_examples_are_on_neither_side_and_a_generated_task_draws_more() -> None:
    task = load_task("arithmetic:n=500")
    split = split_task(task, discovery=150, heldout=300, seed=0)
    fresh = fresh_examples(task, (split.discovery, split.heldout), 400, seed=0)
    used = {e.input_key() for e in (*split.discovery.examples, *split.heldout.examples)}
    assert len(fresh) == 400 and not used & {e.input_key() for e in fresh.examples}
    assert len({e.input_key() for e in fresh.examples}) == 400
    own = {e.input_key() for e in task.examples}
    assert sum(e.input_key() in own for e in fresh.examples) == 50  # the 50 left over, then 350 drawn beyond n
    # A task file cannot make more: it gives what it has.
    assert fresh_examples(cue_task(), (cue_task(),), 10, seed=0) is None


def test_the_data_that_cannot_show_it_is_said_and_nothing_smaller_is_claimed(grouped) -> None:
    few = find(grouped, cue_task(tokens_per_cue=310), discovery=300, heldout=300, batch_size=64, shrink=3)
    assert few.confirmed and not few.shrunk and few.shrink.fresh == 20
    assert few.shrink.note.startswith("shrink: 20 fresh examples cannot show non-inferiority within 3 points")
    assert few.shrink.heads == few.shrink.improving and few.shrink.verdict is None and few.shrink.rank is None
    none = find(grouped, cue_task(tokens_per_cue=300), discovery=300, heldout=300, batch_size=64, shrink=3)
    assert none.shrink.fresh == 0 and "the test needs at least 10" in none.shrink.note and not none.shrunk
    assert data_note(10_000, 3, 0.05) is None and data_note(50, 3, 0.05) is not None
    assert "judges discovery at its 150 examples" in data_note(1000, 3, 0.05, 150)  # growth could take nothing
    assert data_note(1000, 5, 0.05, 150) is None and data_note(1000, 3, 0.05, 300) is None


def test_an_unconfirmed_improving_set_is_not_shrunk(grouped) -> None:
    result = find(grouped, random_label_task(1), discovery=300, heldout=300, batch_size=64, shrink=3)
    assert not result.confirmed and not result.shrunk
    assert "not confirmed" in result.shrink.note and result.shrink.searched == 0


def test_fewer_fresh_examples_than_asked_are_said_in_one_line(grouped, tmp_path) -> None:
    """The cue task holds 400 examples beyond discovery and held-out: asked for 5,000, the test runs on those 400,
    and the run says so (it ran on what there was in silence before)."""
    save_folder(grouped.model, grouped.tokenizer, tmp_path / "model")
    write_jsonl_task(cue_task(), tmp_path / "cue.jsonl")
    result = invoke("find", str(tmp_path / "model"), "--task", str(tmp_path / "cue.jsonl"), "--discovery", "300",
                    "--heldout", "300", "--batch-size", "64", "--shrink", "3", "--shrink-examples", "5000",
                    "--out", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    said = [line for line in result.stderr.splitlines() if "asked for" in line]
    assert said == [f"headprune: warning: shrink: {tmp_path / 'cue.jsonl'} holds 400 fresh examples (on neither side "
                    "of the split), not the 5,000 asked for; the shrunk set is tested on those"], result.stderr
    assert json.loads((tmp_path / "run" / "result.json").read_text())["shrink"]["fresh"] == 400


def test_cli_find_shrink_then_export_the_grown_set(grouped, tmp_path) -> None:
    save_folder(grouped.model, grouped.tokenizer, tmp_path / "model")
    write_jsonl_task(cue_task(), tmp_path / "cue.jsonl")
    out = tmp_path / "run"
    result = invoke("find", str(tmp_path / "model"), "--task", str(tmp_path / "cue.jsonl"), "--discovery", "300",
                    "--heldout", "300", "--batch-size", "64", "--shrink", "3", "--shrink-examples", "300",
                    "--out", str(out))
    assert result.exit_code == 0, result.output
    line = result.stdout.splitlines()[-1]
    assert line.startswith("shrink: ") and "better than the original by" in line and "--pick" in line
    saved = json.loads((out / "result.json").read_text())
    assert saved["shrink"]["verdict"]["accepted"] is True and saved["shrink"]["fresh"] == 300
    assert "## Smaller" in (out / "report.md").read_text()
    rank = saved["shrink"]["rank"]
    exported = invoke("export", str(tmp_path / "model"), "--heads", str(out), "--pick", str(rank), "--out",
                      str(tmp_path / "export"))
    assert exported.exit_code == 0, exported.output  # the claim holds: no --allow-unconfirmed needed
    card = (tmp_path / "export" / "README.md").read_text()
    assert "**Better and smaller**" in card
    record = json.loads((tmp_path / "export" / "headprune_export.json").read_text())
    assert record["parameters"]["after"] == saved["shrink"]["size"]["parameters"]


def test_growth_takes_no_set_a_guard_would_refuse() -> None:
    grid = HeadGrid.uniform(1, 9, 3, 4)
    improving = (Head(0, 0),)
    units = shrink_units(improving, grid.all_heads(), grid)

    def harmless(sets: list[tuple[Head, ...]]) -> list[Paired]:
        return [Paired(300, 0, 0, 0.6, 0.6, 0.0) for _ in sets]

    free = grow_from(improving, units, grid, harmless, budget=Budget(3.0, 1000, 0.05))
    assert [h for u in free.chosen for h in u] == [Head(0, 1), Head(0, 2), Head(0, 3), Head(0, 4), Head(0, 5)]
    guarded = grow_from(improving, units, grid, harmless, budget=Budget(3.0, 1000, 0.05),
                        admit=lambda heads: Head(0, 4) not in heads)  # a guard needs the second group
    assert [h for u in guarded.chosen for h in u] == [Head(0, 1), Head(0, 2), Head(0, 6), Head(0, 7), Head(0, 8)]
    assert guarded.rejected == [(Head(0, 3), Head(0, 4), Head(0, 5))]


@pytest.mark.parametrize(("args", "fragment"), [
    (["--shrink-examples", "100"], "--shrink-examples applies only with --shrink"),
    (["--shrink", "3", "--objective", "compress"], "--shrink applies only with --objective improve"),
    (["--shrink", "0"], "--shrink must be a number of accuracy points above 0"),
    (["--shrink", "3", "--shrink-examples", "5"], "--shrink-examples must be at least 10"),
    (["--shrink", "3", "--shrink-examples", "1000000000000"],
     "--shrink-examples: 1,000,000,000,000, more than the limit of 10,000,000 (the examples of one task"),
])
def test_cli_find_shrink_bad_combinations(handmade_files, tmp_path, args, fragment) -> None:
    result = invoke("find", str(handmade_files / "model"), "--task", str(handmade_files / "cue.jsonl"), *args,
                    "--out", str(tmp_path / "o"))
    assert_refused(result, fragment)
    assert not (tmp_path / "o").exists()


def simulate(runs: int, *, margin: float, excess: float, discovery: int = 300, fresh: int = 1000,
             seed: int = 0) -> tuple[int, int]:
    """Counts-only find --shrink runs through the real growth and test: 4 layers of 3 groups of 3 query heads, the
    improving set one head. On discovery every unit looks all but harmless (so growth takes many); on the fresh
    examples the grown set is truly worse than the improving set by ``margin + excess`` points (right answers
    broken, a few wrong ones rescued). Returns (runs that grew a set, runs whose grown set the test accepted)."""
    rng = np.random.default_rng(seed)
    grid = HeadGrid.uniform(4, 9, 3, 4)
    improving = (Head(0, 0),)
    units = shrink_units(improving, grid.all_heads(), grid)
    grown_runs = accepted = 0
    for _ in range(runs):
        def evaluate(sets: list[tuple[Head, ...]]) -> list[Paired]:
            out = []
            for heads in sets:
                right = rng.random(discovery) < 0.6
                broken = right & (rng.random(discovery) < 0.001 * len(heads))
                out.append(Paired(discovery, 0, int(broken.sum()), right.mean(), (right & ~broken).mean(), 0.0))
            return out

        grown = grow_from(improving, units, grid, evaluate, budget=Budget(margin, fresh, 0.05))
        heads = {*improving, *(h for unit in grown.chosen for h in unit)}
        if len(heads) == 1:
            continue
        grown_runs += 1
        before = rng.random(fresh) < 0.6
        rescued = ~before & (rng.random(fresh) < 0.02)
        damaged = before & (rng.random(fresh) < (0.4 * 0.02 + (margin + excess) / 100) / 0.6)
        after = (before & ~damaged) | rescued
        accepted += fresh_verdict(before, after, margin=margin, removed=len(heads) - 1, alpha=0.05).accepted
    return grown_runs, accepted


def test_counts_only_the_claim_errs_within_its_level_when_the_grown_set_is_truly_worse() -> None:
    """The claim's error: a grown set truly worse than the improving set by more than the margin is accepted at
    most at the test's level (one-sided 2.5%), up to Monte Carlo error; at the margin itself, about at it (measured:
    24 of 960 at the boundary, 5 of 960 at 0.25 points beyond)."""
    grid = HeadGrid.uniform(2, 9, 3, 4)
    units = shrink_units((Head(0, 0),), grid.all_heads(), grid)
    assert units[0] == (Head(0, 1), Head(0, 2)) and len(units) == 6  # the rest of H0's group, then whole groups
    level = 0.025
    for excess, runs in ((0.25, 1500), (0.0, 1500)):
        grown, accepted = simulate(runs, margin=2.0, excess=excess)
        assert grown > 0.9 * runs
        assert accepted / grown <= level + 3 * np.sqrt(level * (1 - level) / grown), (excess, accepted, grown)
    grown, accepted = simulate(300, margin=2.0, excess=-2.0)  # truly no worse: the test has the power to say so
    assert accepted / grown > 0.9
