"""find: the protocol on models where the truth is known, resume, and honest failure modes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from helpers.handmade import PASSENGERS, build_model, cue_task, reversed_task
from helpers.cli import invoke
from headprune.evaluation import Evaluator
from headprune.search.find import expected_joint_evaluations, find
from headprune.search.journal import JOURNAL_NAME
from headprune.search.stats import mcnemar_exact
from headprune.tasks import Example, Task, write_jsonl_task
from helpers import build_tiny, random_choice_task, save_folder


@pytest.fixture(scope="module")
def handmade():  # noqa: ANN201
    return build_model()


def test_harmful_head_is_found_confirmed_and_its_cost_shown(handmade) -> None:
    result = find(handmade, cue_task(), discovery=300, heldout=300, control=reversed_task(), batch_size=64)
    assert result.screen[0].head == "L0.H0"
    assert sorted(result.screen, key=lambda r: -r.paired.gain)[0].head == "L0.H0"
    assert result.nominees[0] == "L0.H0"
    assert [str(h) for h in result.primary] == ["L0.H0"]
    assert result.confirmed and result.verdict.difference > 0 and result.verdict.interval[0] > 0
    assert result.verdict.damaged == 0  # by construction, removing the head can only rescue
    (cost,) = result.finalists[0].controls
    assert cost.difference < 0 and cost.interval[1] < 0


# The false-confirmation rate on null tasks, end to end: tests/test_error_rates.py (and scripts/error_rates.py).


def test_exhaustive_stage_evaluates_every_subset_exactly_once(tmp_path, tokenizer) -> None:
    lm = build_tiny("llama", tokenizer, seed=3)  # 2 layers x 4 heads
    result = find(lm, random_choice_task(130), discovery=60, heldout=60, nominees=5, max_heads=3, finalists=4,
                  extend=0, out=tmp_path, batch_size=32)
    assert expected_joint_evaluations(5, 3) == math.comb(5, 2) + math.comb(5, 3) == 20
    joint = [s for s in result.sets if len(s.heads) > 1]
    assert len(joint) == len({s.heads for s in joint}) == 20
    assert all(set(s.heads) <= set(result.nominees) for s in joint)
    # Singles: the nominees, and any finalist single head (ranked on all of discovery) that is not one of them.
    singles = {s.heads[0] for s in result.sets if len(s.heads) == 1}
    finalist_singles = {f.heads[0] for f in result.finalists if len(f.heads) == 1}
    assert singles == set(result.nominees) | finalist_singles
    keys = [json.loads(line)["key"] for line in (tmp_path / JOURNAL_NAME).read_text().splitlines()[1:]]
    discovery_keys = [k for k in keys if k.startswith("discovery|")]
    assert len(discovery_keys) == len(set(discovery_keys)) == 1 + 8 + 20  # baseline, screen, joint


def test_heldout_numbers_never_change_the_choice(handmade) -> None:
    # Same discovery, two different held-out sets with opposite labels: the finalists must be identical.
    task = cue_task()
    disc = task.subset(list(range(0, 600)))
    held_a = task.subset(list(range(600, 1000)))
    held_b = Task("flipped", "choice", tuple(Example(e.id, prompt=e.prompt, choices=e.choices, answer=1 - e.answer)
                                              for e in held_a.examples))
    a = find(handmade, disc, heldout_task=held_a, discovery=300, heldout=300, batch_size=128)
    b = find(handmade, disc, heldout_task=held_b, discovery=300, heldout=300, batch_size=128)
    # What discovery fixes is the same: the candidates, the sequence's order, the order of the membership tests.
    fixed = ("proposal", "single", "sequence")
    assert [getattr(a.selection, k) for k in fixed] == [getattr(b.selection, k) for k in fixed]
    assert [c.head for c in a.selection.contributions] == [c.head for c in b.selection.contributions]
    assert [t.share for t in a.selection.tests][:1] == [t.share for t in b.selection.tests][:1]
    assert a.finalists[0].heldout.difference > 0 > b.finalists[0].heldout.difference
    assert a.confirmed and not b.confirmed


def test_interrupted_then_resumed_run_gives_the_same_result(tmp_path, tokenizer, monkeypatch) -> None:
    lm = build_tiny("gpt2", tokenizer, seed=5)
    task = random_choice_task(100, seed=2)
    settings = dict(discovery=40, heldout=40, nominees=4, max_heads=3, finalists=3, batch_size=16,
                    control=random_choice_task(30, seed=9))
    whole = find(lm, task, out=tmp_path / "whole", **settings).to_dict()

    real_run = Evaluator.run
    calls = {"n": 0}

    def interrupting_run(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls["n"] += 1
        if calls["n"] == 9:
            raise KeyboardInterrupt
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(Evaluator, "run", interrupting_run)
    with pytest.raises(KeyboardInterrupt):
        find(lm, task, out=tmp_path / "cut", **settings)
    monkeypatch.setattr(Evaluator, "run", real_run)
    journal = tmp_path / "cut" / JOURNAL_NAME
    assert len(journal.read_text().splitlines()) == 1 + 8
    with journal.open("a") as handle:
        handle.write('{"key": "discovery|L1.H')  # a line cut short by a kill
    resumed = find(lm, task, out=tmp_path / "cut", resume=True, **settings).to_dict()
    whole.pop("timings"), resumed.pop("timings")
    assert resumed == whole


def test_resume_refuses_another_model(tmp_path, tokenizer) -> None:
    from headprune.errors import ResultFileError

    task = random_choice_task(60)
    find(build_tiny("llama", tokenizer, seed=1), task, discovery=20, heldout=20, nominees=2, max_heads=2,
         finalists=1, out=tmp_path)
    with pytest.raises(ResultFileError, match=r"the model tiny-llama has other weights than it had \(sha256:"):
        find(build_tiny("llama", tokenizer, seed=2), task, discovery=20, heldout=20, nominees=2, max_heads=2,
             finalists=1, out=tmp_path, resume=True)


def test_mcnemar_exact_matches_the_binomial() -> None:
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 0) == pytest.approx(2 / 32)
    assert mcnemar_exact(3, 3) == 1.0
    assert mcnemar_exact(10, 2) == pytest.approx(2 * sum(math.comb(12, k) for k in range(3)) / 4096)


# ------------------------------------------------------------------ the command line


def test_cli_find_writes_outputs_and_exits_0_when_confirmed(handmade_files, tmp_path) -> None:
    out = tmp_path / "run"
    result = invoke("find", str(handmade_files / "model"), "--task", str(handmade_files / "cue.jsonl"), "--discovery",
                    "300", "--heldout", "300", "--control", str(handmade_files / "reversed.jsonl"), "--batch-size",
                    "64", "--control", str(handmade_files / "cue.jsonl"), "--control-limit", "100", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert "CONFIRMED improvement" in result.stdout.splitlines()[-1]
    saved = json.loads((out / "result.json").read_text())
    assert saved["schema_version"] == 6 and saved["finalists"][0]["heads"] == ["L0.H0"]
    assert saved["finalists"][0]["heldout"]["confirmed"] is True
    assert saved["model"]["weight_hash"].startswith("sha256:") and saved["task"]["hash"].startswith("sha256:")
    assert (out / "screen.png").stat().st_size > 1000
    assert [Path(c["name"]).stem for c in saved["control_tasks"]] == ["reversed", "cue"]
    assert all(len(f["controls"]) == 2 for f in saved["finalists"])  # every finalist on every control
    assert (out / "controls.png").stat().st_size > 1000 and "controls.png" in (out / "report.md").read_text()
    assert "L0.H0" in (out / "report.md").read_text()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_cli_find_exits_1_without_confirmation(handmade_files, tmp_path) -> None:
    result = invoke("find", str(handmade_files / "model"), "--task", str(handmade_files / "reversed.jsonl"),
                    "--discovery", "200", "--heldout", "200", "--batch-size", "64", "--out", str(tmp_path / "r"),
                    "--json")
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["confirmed"] is False


@pytest.mark.parametrize(("args", "fragment"), [
    (["--task", "nope"], "unknown task"),
    (["--discovery", "900", "--heldout", "200"], "distinct examples"),
    (["--nominees", "2", "--max-heads", "3"], "--max-heads (3) is larger than --nominees (2)"),
    (["--task", "TEXT"], "text task"),
])
def test_cli_find_bad_input(handmade_files, tmp_path, args, fragment) -> None:
    base = ["--task", str(handmade_files / "cue.jsonl")]
    if "--task" in args:
        base = []
        if args[1] == "TEXT":
            (tmp_path / "t.jsonl").write_text('{"text": "xp_1 xp_2"}\n' * 30)
            args = ["--task", str(tmp_path / "t.jsonl")]
    result = invoke("find", str(handmade_files / "model"), *base, *args, "--out", str(tmp_path / "o"))
    assert result.exit_code == 2, result.output
    assert fragment in result.output and "Traceback" not in result.output


def test_cli_find_unwritable_out_and_foreign_resume(handmade_files, tmp_path, tokenizer) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    result = invoke("find", str(handmade_files / "model"), "--task", str(handmade_files / "cue.jsonl"), "--out",
                    str(blocker / "sub"))
    assert result.exit_code == 2 and "cannot write" in result.output
    other = tmp_path / "other-model"
    lm = build_tiny("llama", tokenizer)
    save_folder(lm.model, tokenizer, other)
    task = tmp_path / "c.jsonl"
    write_jsonl_task(random_choice_task(60), task)
    common = ["--task", str(task), "--discovery", "20", "--heldout", "20", "--nominees", "2", "--max-heads", "2",
              "--finalists", "1", "--out", str(tmp_path / "run")]
    invoke("find", str(other), *common)
    result = invoke("find", str(handmade_files / "model"), *common, "--resume")
    assert result.exit_code == 2 and "different model" in result.output


def test_cli_find_reports_cost_and_progress_without_a_terminal(handmade_files, tmp_path) -> None:
    # CliRunner's stderr is not a terminal: find says what it will do and how long it should take, per stage.
    result = invoke("find", str(handmade_files / "model"), "--task", str(handmade_files / "cue.jsonl"), "--discovery",
                    "100", "--heldout", "100", "--nominees", "3", "--max-heads", "2", "--finalists", "2",
                    "--batch-size", "64", "--out", str(tmp_path / "r"))
    assert result.exit_code in (0, 1), result.output
    lines = result.stderr.splitlines()
    planned = next(line for line in lines if "planned:" in line)
    assert "4 screen, 3 joint, 6 extend, 4 membership and 11 held-out/control conditions at most" in planned
    assert "estimated at most" in planned
    ran = {line.split(": ")[1]: int(line.split(": ")[2].split()[0]) for line in lines
           if line.startswith("headprune: ") and line.endswith(" conditions") and line.count(": ") == 2}
    assert ran["screen"] == 4 and ran.get("extend", 0) <= 6 and ran.get("membership", 0) <= 5, ran  # at most
    assert any(line.startswith("headprune: screen: 4 conditions") for line in lines)
    assert any(line.startswith("headprune: joint: 3 conditions done in") for line in lines)


def holm_by_rejection(p_values: list[float]) -> list[float]:
    """Holm-adjusted p-values by their definition, not by headprune's formula: for each hypothesis, the
    smallest family-wise level at which Holm's step-down procedure (reject the k-th smallest p while
    p_(k) * (m - k) <= level, stop at the first that fails) rejects it; 1 if none does."""
    m, order = len(p_values), sorted(range(len(p_values)), key=lambda i: p_values[i])
    levels = sorted({(m - k) * p_values[i] for k, i in enumerate(order)} | {1.0})

    def rejected(level: float) -> set[int]:
        out = set()
        for k, i in enumerate(order):
            if (m - k) * p_values[i] > level:
                break
            out.add(i)
        return out

    return [min([level for level in levels if level <= 1.0 and i in rejected(level)], default=1.0)
            for i in range(m)]


def test_holm_adjustment() -> None:
    from headprune.search.stats import holm

    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])
    assert holm([0.9, 0.8, 0.7]) == pytest.approx([1.0, 1.0, 1.0])  # capped at 1
    assert holm([0.02, 0.2, 0.01]) == pytest.approx([0.04, 0.2, 0.03])  # monotone in the sorted order
    import random

    rng = random.Random(0)
    for size in (1, 2, 3, 5, 10):
        for _ in range(50):
            p = [rng.uniform(0, 0.3) ** 2 for _ in range(size)]
            assert holm(p) == pytest.approx(holm_by_rejection(p))


def test_only_the_primary_set_can_be_confirmed(tmp_path) -> None:
    # Two harmful heads (H1 a weaker one): the primary is both, finalist 2 is H0 alone, a real improvement too.
    handmade = build_model(passengers={1: 0.1})
    result = find(handmade, cue_task(), discovery=300, heldout=300, finalists=4, batch_size=64)
    primary, *others = result.finalists
    assert primary.heldout.role == "primary" and primary.heldout.adjusted_p is None and result.confirmed
    raw = [f.heldout.p_value for f in result.finalists]
    for finalist in others:  # Bonferroni over all finalists, primary included, so each interval agrees with it
        v = finalist.heldout
        assert v.role == "exploratory" and v.adjusted_p == pytest.approx(min(1.0, len(raw) * v.p_value))
        assert v.family == len(raw) and (v.interval[0] > 0 or v.interval[1] < 0) == (v.adjusted_p < 0.05)
        assert not v.confirmed  # even where its own p-value is tiny (these sets contain a harmful head)
    assert any(f.heldout.p_value < 0.05 and f.heldout.difference > 0 for f in others)
    from headprune.report.markdown import render_markdown

    report = render_markdown(result)
    assert "| 2 | exploratory |" in report and "Bonferroni-adjusted" in report
    # An export of finalist 2 says exploratory in its card and never claims confirmation.
    from headprune.exporter import export

    record = export(handmade, result, set_rank=2, allow_unconfirmed=True,
                    verify_task=cue_task().subset(list(range(40))), out=tmp_path / "x")
    card = (tmp_path / "x" / "README.md").read_text()
    assert record.origin.verdict.role == "exploratory" and "**Exploratory**" in card and "confirmed**" not in card


# ------------------------------------------------------------------ parsimony


def test_rank_key_puts_fewer_heads_before_the_margin() -> None:
    from headprune.heads import Head
    from headprune.search.find import rank_key
    from headprune.search.paired import Paired

    alone, with_passenger = (Head(0, 0),), (Head(0, 0), Head(0, 1))
    plain, nudged = Paired(300, 30, 0, 0.8, 0.9, 1.0), Paired(300, 30, 0, 0.8, 0.9, 1.2)
    assert rank_key(plain, alone, "gain") < rank_key(nudged, with_passenger, "gain")
    damaging = Paired(300, 31, 1, 0.8, 0.9, 1.0)  # same gain, more damage: worse even with fewer heads
    assert rank_key(plain, with_passenger, "gain") < rank_key(damaging, alone, "gain")
    assert rank_key(Paired(300, 31, 0, 0.8, 0.9, 0.0), with_passenger, "gain") < rank_key(plain, alone, "gain")
    # rank_by=margin: the margin is the measure the user chose, so it comes first
    assert rank_key(nudged, with_passenger, "margin") < rank_key(plain, alone, "margin")


@pytest.fixture(scope="module")
def passengers():  # noqa: ANN201
    return build_model(passengers=PASSENGERS)


def test_passenger_heads_do_not_ride_along_with_the_harmful_head(passengers) -> None:
    from headprune.report.markdown import render_markdown

    result = find(passengers, cue_task(), discovery=300, heldout=300, finalists=4, batch_size=64)
    sets = {s.heads: s.paired for s in result.sets}
    # The trap, on discovery: H2 adds a gain of +2 on top of H0, H1 changes no answer but raises the margins.
    assert sets[("L0.H0", "L0.H2")].gain == sets[("L0.H0",)].gain + 2
    assert sets[("L0.H0", "L0.H1", "L0.H2")].gain == sets[("L0.H0", "L0.H2")].gain
    assert sets[("L0.H0", "L0.H1", "L0.H2")].margin_change > sets[("L0.H0", "L0.H2")].margin_change
    assert [str(h) for h in result.primary] == ["L0.H0"] and result.confirmed
    selection = result.selection
    assert selection.proposal == ("L0.H0", "L0.H2") and selection.measure == "accuracy"  # the search half's best
    first, second = selection.contributions  # tested in the search half's order: H0 first, then the passenger
    assert (first.head, first.rank, first.earned) == ("L0.H0", 1, True)
    assert (second.head, second.rank, second.earned) == ("L0.H2", 2, False) and selection.kept == ("L0.H0",)
    assert first.rescued == first.check_rescued + first.heldout_rescued  # the check half and held-out together
    assert result.split.search + result.split.check == result.split.discovery == 300
    assert selection.check + selection.search == 300 and selection.heldout == 300
    (alone,) = result.finalists[0].contributions
    assert alone == first
    report = render_markdown(result)
    # The procedure that decided is shown: the sequence stopped at H2; the membership tests decided nothing here.
    assert "## How the primary set was chosen" in report and "| 2 | `L0.H0,L0.H2` | `L0.H0` |" in report
    assert "| no |" in report and "decided nothing here" in report and "| 2 | `L0.H2` |" not in report
    # A result.json written by 0.2 (no selection) and one written before parsimony still load and render.
    from headprune.search.find_result import FindResult

    old = result.to_dict()
    old["schema_version"] = 2
    del old["selection"]
    for finalist in old["finalists"]:
        del finalist["contributions"]
    loaded = FindResult.from_dict(old)
    assert loaded.selection is None and loaded.parsimony is None and loaded.finalists[0].contributions == ()
    assert "How the primary set was chosen" not in render_markdown(loaded)


def test_a_journal_of_0_2_is_refused_on_resume(tmp_path, passengers) -> None:
    """A run begun by 0.2.0 (its journal's first line, tests/data/find-0.2) is not continued under this rule."""
    import shutil

    from headprune.errors import ResultFileError

    shutil.copy(Path(__file__).parent / "data" / "find-0.2" / JOURNAL_NAME, tmp_path / JOURNAL_NAME)
    with pytest.raises(ResultFileError, match="0.2's rule .* cannot be mixed") as refused:
        find(passengers, cue_task(), discovery=300, heldout=300, finalists=3, batch_size=64, out=tmp_path,
             resume=True)
    assert "\n" not in str(refused.value)


def test_extend_takes_a_step_only_when_the_added_head_earns_its_place(passengers) -> None:
    from collections import Counter

    result = find(passengers, cue_task(), discovery=300, heldout=300, nominees=4, max_heads=1, extend=2,
                  finalists=2, batch_size=64)
    # Step 1 tries H0 with each other head; the best, H0+H2, adds +2 (2 to 0), p = 0.25: no step is taken.
    assert Counter(len(s.heads) for s in result.sets) == {1: 4, 2: 3}
    assert [str(h) for h in result.primary] == ["L0.H0"]


def test_margin_ranking_keeps_heads_that_raise_margins(passengers) -> None:
    result = find(passengers, cue_task(), discovery=300, heldout=300, finalists=2, rank_by="margin",
                  batch_size=64)
    primary = result.finalists[0]
    assert result.selection.measure == "margin" and set(primary.heads) == {"L0.H0", "L0.H1", "L0.H2"}
    assert len(primary.contributions) == 3
    assert all(c.earned and c.rescued > 10 * c.damaged for c in primary.contributions)
    assert all(c.heldout_rescued + c.check_rescued == c.rescued for c in primary.contributions)


def test_extended_sets_are_pruned_through_the_journal(tmp_path) -> None:
    lm = build_model(passengers={1: 0.1, 2: 0.02})  # H1: a second harmful head; H2: a passenger
    settings = dict(discovery=600, heldout=300, nominees=4, max_heads=1, extend=2, finalists=3, batch_size=64)
    result = find(lm, cue_task(), out=tmp_path, **settings)
    assert any(len(s.heads) == 3 for s in result.sets)  # extend reached three heads (H0, H1, then one more)
    assert [str(h) for h in result.primary] == ["L0.H0", "L0.H1"]
    assert all(c.earned for c in result.finalists[0].contributions)
    journal = tmp_path / JOURNAL_NAME
    keys = [json.loads(line)["key"] for line in journal.read_text().splitlines()[1:]]
    assert len(keys) == len(set(keys)) and "discovery|L0.H0,L0.H2" in keys
    before = journal.read_text()
    resumed = find(lm, cue_task(), out=tmp_path, resume=True, **settings)
    assert journal.read_text() == before  # resuming evaluated nothing again
    assert resumed.to_dict() | {"timings": {}} == result.to_dict() | {"timings": {}}


def test_the_discovery_test_is_an_exact_one_sided_binomial_at_any_size() -> None:
    from fractions import Fraction

    import numpy as np

    from headprune.search.parsimony import upper_tail

    def exact(b: int, n: int) -> float:
        return float(Fraction(sum(math.comb(n, k) for k in range(max(b, 0), n + 1)), 2**n))

    for b, n in [(0, 0), (0, 5), (3, 3), (2, 2), (6, 6), (9, 12), (5, 10), (530, 1000), (2100, 4096)]:
        assert upper_tail(b, n) == pytest.approx(exact(b, n), rel=1e-12, abs=1e-300)
    # Beyond 4,096 pairs (a log-space sum) against the distribution built by convolution, one pair at a time.
    distribution, wanted = np.ones(1), {8192: [4000, 4300, 4500], 10_000: [5100, 5300]}
    for n in range(1, 10_001):
        distribution = (np.append(distribution, 0.0) + np.append(0.0, distribution)) / 2
        for b in wanted.get(n, []):
            assert upper_tail(b, n) == pytest.approx(distribution[b:].sum(), rel=1e-9)
    assert 0 < upper_tail(50_400, 100_000) < 0.01 and upper_tail(49_000, 100_000) > 0.99  # no overflow
    assert upper_tail(2, 2) == 0.25 and upper_tail(5, 5) == 1 / 32
