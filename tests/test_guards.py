"""find --guard: what must not break steers the search and joins the claim, and the claim's error rate holds.

On the hand-made model (tests/helpers/handmade.py) head L0.H0 hurts ``cue`` and helps ``reversed-cue``: removing it
improves the task and costs the guard about 10 points. With a 5-point margin no set holding L0.H0 may be proposed;
with a 60-point margin it ships, the guard held. The error rates run find's own search code on counts-only models
(``headprune.search.simulation.guards``; ``scripts/guard_rates.py`` runs the same cells with more runs).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from helpers.cli import assert_refused, invoke
from helpers.handmade import build_model, cue_task, reversed_task
from headprune.errors import SearchSettingsError, TaskError, UnconfirmedSetError
from headprune.evaluation import Evaluator
from headprune.search.find import find
from headprune.search.find_result import FindResult
from headprune.search.guards import GuardEffect, parse_guard, skewness
from headprune.search.simulation.guards import run_guarded
from headprune.search.journal import JOURNAL_NAME
from headprune.tasks import load_task, write_jsonl_task
from helpers import save_folder

SMALL = dict(discovery=300, heldout=300, batch_size=64)


@pytest.fixture(scope="module")
def handmade():  # noqa: ANN201
    return build_model()


@pytest.fixture(scope="module")
def files(tmp_path_factory, handmade):  # noqa: ANN001, ANN201
    root = tmp_path_factory.mktemp("guard-files")
    write_jsonl_task(cue_task(), root / "cue.jsonl")
    write_jsonl_task(reversed_task(), root / "reversed.jsonl")
    save_folder(handmade.model, handmade.tokenizer, root / "model")
    return root


@pytest.mark.parametrize("text, task, margin", [
    ("sentiment", "sentiment", None), ("sentiment:margin=3", "sentiment", 3.0),
    ("sentiment:n=600,margin=2.5", "sentiment:n=600", 2.5), ("lm-eval:hellaswag:margin=4", "lm-eval:hellaswag", 4.0),
    ("general:margin=0.02", "general", 0.02), ("a.jsonl:length_normalize=true", "a.jsonl:length_normalize=true", None)])
def test_a_guard_spec_is_the_task_and_its_margin(text: str, task: str, margin: float | None) -> None:
    spec = parse_guard(text)
    assert (spec.task, spec.margin) == (task, margin)


@pytest.mark.parametrize("text", ["sentiment:margin=-1", "sentiment:margin=x", "sentiment:margin=nan",
                                  "sentiment:margin=0", "sentiment:margin=1,margin=2", "sentiment:margin=inf",
                                  "sentiment:margin=150", "sentiment:margin=1e308"])
def test_a_bad_margin_is_refused(text: str) -> None:
    with pytest.raises(SearchSettingsError, match="margin"):
        parse_guard(text)


def test_a_guard_the_set_hurts_steers_the_search_away(handmade, files) -> None:
    guarded = find(handmade, cue_task(), guard=f"{files / 'reversed.jsonl'}:margin=5", **SMALL)
    assert "L0.H0" not in guarded.finalists[0].heads  # the only helpful head costs the guard ~10 points
    assert guarded.guarding is not None and guarded.guarding.kept
    broke = [t for t in guarded.guarding.tried if "L0.H0" in t.heads]
    assert broke and not any(t.kept for t in broke)
    assert all(e.difference < -0.05 for t in broke for e in t.effects)
    (effect,) = guarded.finalists[0].guards
    assert effect.role == "primary" and effect.held and effect.n == 400  # 600 guard examples: 200 searched
    assert not guarded.confirmed  # nothing that keeps the guard improves the task
    unguarded = find(handmade, cue_task(), **SMALL)
    assert unguarded.confirmed and unguarded.finalists[0].heads == ("L0.H0",)


def test_a_wide_margin_ships_the_gain_with_the_guard_held(handmade, files) -> None:
    result = find(handmade, cue_task(), guard=f"{files / 'reversed.jsonl'}:margin=60", **SMALL)
    assert result.finalists[0].heads == ("L0.H0",) and result.confirmed
    (effect,) = result.finalists[0].guards
    low, high = effect.interval
    assert effect.held and -0.6 < low < effect.difference < high < 0  # a real cost, within the margin
    assert all(g.role == "exploratory" and g.family == len(result.finalists) for f in result.finalists[1:]
               for g in f.guards)
    again = FindResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.confirmed and again.finalists[0].guards == result.finalists[0].guards
    assert again.guard_tasks[0].margin == pytest.approx(0.6)


def test_the_cli_says_it_and_export_refuses_an_unkept_guard(files, tmp_path) -> None:
    out = tmp_path / "run"
    found = invoke("find", str(files / "model"), "--task", str(files / "cue.jsonl"), "--discovery", "300",
                   "--heldout", "300", "--guard", f"{files / 'reversed.jsonl'}:margin=5", "--out", str(out))
    assert found.exit_code == 1, found.output
    line = found.output.strip().splitlines()[-1]
    assert "reversed.jsonl held: " in line and "against -5 points" in line and "passed over" in line
    report = (out / "report.md").read_text()
    assert "## Guards" in report and "intersection-union" in report and "### The front" in report
    assert (out / "front.png").stat().st_size > 1000
    assert_refused(invoke("export", str(files / "model"), "--heads", str(out), "--out", str(tmp_path / "x")),
                   "not confirmed")
    picked = invoke("export", str(files / "model"), "--heads", str(out), "--pick", "2", "--allow-unconfirmed",
                    "--out", str(tmp_path / "picked"))
    assert picked.exit_code == 0, picked.output
    card = (tmp_path / "picked" / "README.md").read_text()
    assert "**Unconfirmed (exploratory)**: finalist 2" in card and "held-out numbers were seen" in card
    assert "Guards (tasks this model must not be worse at" in card and "exploratory (not a claim)" in card


def test_a_confirmed_gain_whose_guard_failed_is_not_exported(handmade, files) -> None:
    from dataclasses import replace

    from headprune.exporter.resolve import refuse_unconfirmed

    result = find(handmade, cue_task(), guard=f"{files / 'reversed.jsonl'}:margin=60", **SMALL)
    refuse_unconfirmed(result, 1)  # confirmed, guard held: exported
    (effect,) = result.finalists[0].guards
    failed = replace(effect, margin=0.05)  # the same counts judged at 5 points: the guard does not hold
    assert not failed.held
    broken = replace(result, finalists=(replace(result.finalists[0], guards=(failed,)), *result.finalists[1:]))
    assert broken.verdict.confirmed and not broken.confirmed
    with pytest.raises(UnconfirmedSetError, match="did not hold"):
        refuse_unconfirmed(broken, 1)


@pytest.mark.parametrize("args, fragment", [
    (["--guard", "no-such-task"], "unknown task"),
    (["--guard", "sentiment:margin=-2"], "margin must be a positive number"),
    (["--guard", "{cue}:margin=5"], "holds examples of the task itself"),
    (["--guard", "none", "--guard-limit", "90"], "--guard-limit applies only with a guard"),
    (["--guard-limit", "90"], "its text test needs at least 100 held out (150 in all)"),
    (["--guard", "none", "--guard", "general"], "--guard none runs without guards: give it alone"),
    (["--guard", "{cue}:margin=150"], "margin 150 is beyond what the task can measure"),
    (["--guard", "general:margin=10.5"], "margin 10.5 is beyond what the task can measure"),
    (["--guard", "general", "--objective", "compress"], "--guard applies only with --objective improve")])
def test_bad_guards_are_one_line_and_exit_2(files, tmp_path, args: list[str], fragment: str) -> None:
    args = [a.format(cue=files / "cue.jsonl") for a in args]
    result = invoke("find", str(files / "model"), "--task", str(files / "cue.jsonl"), "--discovery", "100",
                    "--heldout", "100", *args, "--out", str(tmp_path / "run"))
    assert_refused(result, fragment)
    assert not (tmp_path / "run").exists()


def _tiny_llama(tokenizer, positions: int):  # noqa: ANN001, ANN202
    import torch
    from transformers import AutoModelForCausalLM

    from headprune.loading.models import wrap_model
    from headprune.testing import tiny_config

    config = tiny_config("llama", len(tokenizer))
    config.max_position_embeddings = positions
    torch.manual_seed(0)
    return wrap_model(AutoModelForCausalLM.from_config(config, attn_implementation="eager"), tokenizer, name="tiny")


GENERAL_RUN = dict(discovery=60, heldout=60, nominees=3, max_heads=2, finalists=2, batch_size=16)


def test_general_guard_needs_no_data_of_the_users(tokenizer) -> None:
    from headprune.testing import random_choice_task

    general = load_task("general")
    assert general.kind == "text" and len(general) == 600 and len({e.text for e in general.examples}) == 600
    lm = _tiny_llama(tokenizer, 512)  # the byte-level test tokenizer makes up to 341 tokens of a text: all fit
    result = find(lm, random_choice_task(140), guard="general", **GENERAL_RUN)
    (effect,) = result.finalists[0].guards
    assert effect.metric == "mean_nll" and effect.margin == 0.05 and effect.n == 400  # 600 texts: 200 searched
    assert math.isfinite(effect.interval[0]) and effect.interval[0] <= effect.difference <= effect.interval[1]


def test_finds_default_guard_is_general_on_the_texts_that_fit_a_short_model(tokenizer, caplog) -> None:
    from headprune.testing import random_choice_task

    lm = _tiny_llama(tokenizer, 256)  # 207 of the 600 texts are longer than 256 tokens of the test tokenizer
    with caplog.at_level("INFO", logger="headprune"):
        result = find(lm, random_choice_task(140), default_guard=True, **GENERAL_RUN)
    assert [g.task.name for g in result.guard_tasks] == ["general"]
    (effect,) = result.finalists[0].guards
    assert effect.n == 262 and result.guarding.discovery == (131,)  # 393 fit: a third searched, the rest held out
    said = [r.getMessage() for r in caplog.records if "guard" in r.getMessage()]
    assert said[:2] == ["find's default guard: general, margin 0.05 nats of mean NLL (--guard none runs without it)",
                        "guard general: 207 of its 600 examples are longer than the model's 256 positions and left "
                        "out; it runs on 393 of the rest (131 searched, 262 held out)"]


def test_the_command_line_guards_with_general_unless_told_none(tiny_folder, tmp_path) -> None:
    from headprune.testing import random_choice_task

    write_jsonl_task(random_choice_task(140), tmp_path / "t.jsonl")
    common = ["find", str(tiny_folder), "--task", str(tmp_path / "t.jsonl"), "--discovery", "60", "--heldout", "60",
              "--nominees", "2", "--max-heads", "2", "--finalists", "1"]
    guarded = invoke(*common, "--out", str(tmp_path / "guarded"))
    assert guarded.exit_code in (0, 1), guarded.output
    assert "find's default guard: general" in guarded.stderr and "guard general " in guarded.stdout
    record = json.loads((tmp_path / "guarded" / "result.json").read_text())
    assert [g["task"]["name"] for g in record["guard_tasks"]] == ["general"]
    bare = invoke(*common, "--guard", "none", "--out", str(tmp_path / "bare"))
    assert bare.exit_code in (0, 1), bare.output
    assert "default guard" not in bare.output and "guard general" not in bare.output
    assert not (tmp_path / "bare" / "front.png").exists()
    assert json.loads((tmp_path / "bare" / "result.json").read_text()).get("guard_tasks", []) == []


def test_finds_default_guard_steps_aside_where_too_few_texts_fit_and_a_named_one_is_refused(handmade,
                                                                                           caplog) -> None:
    with caplog.at_level("INFO", logger="headprune"):  # 32 positions: 113 texts fit, fewer than the test needs
        bare = find(handmade, cue_task(), default_guard=True, **SMALL)
    assert bare.guard_tasks == () and bare.guarding is None and bare.confirmed
    assert any("default guard general is left out" in r.getMessage() and "fit the model's 32 positions" in
               r.getMessage() for r in caplog.records)
    with pytest.raises(SearchSettingsError, match="113 distinct examples that fit the model's 32 positions"):
        find(handmade, cue_task(), guard="general", **SMALL)  # named: refused, not left out


def test_finds_default_guard_steps_aside_on_a_model_that_does_not_predict_text(tokenizer) -> None:
    from helpers import build_tiny

    from headprune.search.find_result import FindSettings
    from headprune.search.split import fit_guards, load_inputs
    from headprune.testing import random_choice_task

    settings = FindSettings()
    inputs = load_inputs(random_choice_task(140), None, None, settings, 60, 60, default_guard=True)
    assert [g.task.name for g in inputs.guards] == ["general"] and inputs.guards[0].optional
    fitted, notes = fit_guards(inputs, build_tiny("bert", tokenizer), settings)
    assert fitted.guards == () and notes == [
        "find's default guard general is left out: text tasks need a causal language model; tiny-bert is an encoder "
        "(or a model read by its hidden states)"]
    named = load_inputs(random_choice_task(140), None, None, settings, 60, 60, guard="general")
    with pytest.raises(TaskError, match="text tasks need a causal language model"):
        fit_guards(named, build_tiny("bert", tokenizer), settings)


def test_a_run_cut_in_the_guard_stage_resumes_without_recomputing(handmade, files, tmp_path, monkeypatch) -> None:
    settings = dict(guard=f"{files / 'reversed.jsonl'}:margin=5", **SMALL)
    whole = find(handmade, cue_task(), out=tmp_path / "whole", **settings).to_dict()
    real_run = Evaluator.run
    seen = {"guard": 0, "after": 0}

    def cut_in_guard_stage(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if "reversed" in self.task.name and "held-out" in self.task.name and args and args[0]:
            seen["guard"] += 1
            if seen["guard"] == 3:
                raise KeyboardInterrupt
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(Evaluator, "run", cut_in_guard_stage)
    with pytest.raises(KeyboardInterrupt):
        find(handmade, cue_task(), out=tmp_path / "cut", **settings)
    keys = [json.loads(line)["key"] for line in (tmp_path / "cut" / JOURNAL_NAME).read_text().splitlines()[1:]]
    assert sum(k.startswith("guard-heldout:0|L") for k in keys) == 2

    def counting(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        seen["after"] += 1
        return real_run(self, *args, **kwargs)

    monkeypatch.setattr(Evaluator, "run", counting)
    resumed = find(handmade, cue_task(), out=tmp_path / "cut", resume=True, **settings).to_dict()
    finalists = len(whole["finalists"])
    assert seen["after"] == finalists - 2  # only the guard conditions the cut run had not journalled
    whole.pop("timings"), resumed.pop("timings")
    assert resumed == whole


def test_eval_tests_a_guard_on_fresh_data(files) -> None:
    result = invoke("eval", str(files / "model"), "--task", str(files / "reversed.jsonl"), "--heads", "L0.H0",
                    "--margin", "5", "--json")
    assert result.exit_code == 0, result.output
    guard = json.loads(result.stdout)["guard"]
    assert guard["difference"] < -0.05 and not guard["within"]
    wide = invoke("eval", str(files / "model"), "--task", str(files / "reversed.jsonl"), "--heads", "L0.H0",
                  "--margin", "60")
    assert "reversed.jsonl held: " in wide.output
    assert_refused(invoke("eval", str(files / "model"), "--task", str(files / "reversed.jsonl"), "--margin", "5"),
                   "margin applies only with --heads")


def test_eval_refuses_a_margin_the_task_cannot_measure(files) -> None:
    import warnings

    reversed_task_file = str(files / "reversed.jsonl")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow on the way to the refusal
        for margin in ("150", "1e308"):
            assert_refused(invoke("eval", str(files / "model"), "--task", reversed_task_file, "--heads", "L0.H0",
                                  "--margin", margin), f"--margin {float(margin):g} is beyond what the task can measure")
        for margin in ("inf", "nan", "0"):
            assert_refused(invoke("eval", str(files / "model"), "--task", reversed_task_file, "--heads", "L0.H0",
                                  "--margin", margin), "--margin must be a positive number")
        assert_refused(invoke("eval", str(files / "model"), "--task", "general", "--heads", "L0.H0", "--margin",
                              "11"), "--margin 11 is beyond what the task can measure")
        assert_refused(invoke("eval", str(files / "model"), "--task", "general:n=99", "--heads", "L0.H0",
                              "--margin", "0.05"), "general has 99 texts; the test of a text task needs at least 100")


def test_the_text_guards_test_holds_its_level_on_skewed_and_heavy_tailed_changes() -> None:
    # scripts/guard_size.py's families at the null's boundary (the true mean change is the margin), at the least
    # number of held-out texts a text guard takes and at general's; 4,000 draws a cell (its record: 20,000).
    from scripts.guard_size import FAMILIES, rates

    rng = np.random.default_rng(0)
    draws = 4000
    bound = 0.025 + 3 * math.sqrt(0.025 * 0.975 / draws)
    for family in ("gamma, shape 0.25 (4)", "lognormal, sigma 1 (6.2)", "Pareto tail, index 3 (infinite)",
                   "t, 3 degrees of freedom (0)", "normal (0)"):
        for n in (100, 400):
            size = rates(FAMILIES[family], n, draws, rng)
            assert size["now"] <= bound, (family, n, size)
    hot = rates(FAMILIES["lognormal, sigma 1 (6.2)"], 160, draws, rng)
    assert hot["hall"] > bound and hot["t"] > 2 * bound  # 0.3's test and the plain t: why the test is corrected
    power = rates(FAMILIES["gamma, shape 1 (2)"], 400, draws, rng, shift=-0.2)  # true change 0.2 spreads inside
    assert power["now"] >= 0.9 and power["hall"] - power["now"] < 0.05  # measured 0.926 against 0.952


def test_the_text_guards_interval_ends_are_mirror_images_and_the_upper_end_is_the_test() -> None:
    from headprune.search.skewed_mean import mean_bounds

    rng = np.random.default_rng(1)
    changes = rng.lognormal(0, 1, size=(200, 120))
    mean, spread = changes.mean(1), changes.std(1, ddof=1)
    skew = np.array([skewness(c) for c in changes])
    low, high = mean_bounds(mean, spread, skew, 120, alpha=0.05)
    mirror_low, mirror_high = mean_bounds(-mean, spread, -skew, 120, alpha=0.05)
    assert np.allclose(low, -mirror_high) and np.allclose(high, -mirror_low) and np.all(low < mean)
    effects = [GuardEffect("g", "mean_nll", 1.9, 120, 3.0, 3.0 + float(m), spread=float(sd), skewness=float(k))
               for m, sd, k in zip(mean, spread, skew)]
    within = [e.within for e in effects]
    assert within == list(high < 1.9) and 0 < sum(within) < len(within)  # the upper end decides the test
    bigger = mean_bounds(1.0, 1.0, np.linspace(0, 12, 400), 120, alpha=0.05)[1]
    assert np.all(np.diff(bigger) >= -1e-12)  # a sample that looks more skewed is never judged more leniently


@pytest.mark.usefixtures("quiet_headprune")
@pytest.mark.parametrize("size, effect", [("150/300", (0.078, 0.003)), ("2000/1000", (0.008, 0.002))])
def test_find_never_claims_a_broken_guard_beyond_alpha(size: str, effect: tuple[float, float]) -> None:
    discovery, heldout = map(int, size.split("/"))
    runs = 150
    for family in ("boundary", "conflict"):
        out = [run_guarded(seed, family=family, effect=effect, margin=0.05, discovery=discovery, heldout=heldout)
               for seed in range(runs)]
        rate = np.mean([o.false_guard_claim for o in out])
        assert rate <= 0.025 + 2 * math.sqrt(0.025 * 0.975 / runs), (family, rate)


@pytest.mark.usefixtures("quiet_headprune")
def test_a_larger_confirmed_set_that_breaks_the_guard_ships_the_set_before_it() -> None:
    """Both real heads together cost the guard its margin, one alone half of it: where the sequence confirmed both
    and the guards' fixed sequence stopped at the pair, the head before it ships, confirmed, keeping the guard."""
    runs = 60
    out = [run_guarded(seed, family="near", effect=(0.078, 0.003), margin=0.05, discovery=150, heldout=300)
           for seed in range(runs)]
    stopped = [o for o in out if o.stopped]
    assert len(stopped) >= runs // 10  # measured 26 of 60
    assert all(o.confirmed and len(o.primary) == 1 and o.good_ship for o in stopped)


@pytest.mark.usefixtures("quiet_headprune")
def test_a_set_that_keeps_the_guard_is_found_when_one_exists() -> None:
    runs = 100
    kw = dict(family="conflict", effect=(0.078, 0.003), margin=0.05, discovery=150, heldout=300)
    guarded = [run_guarded(seed, **kw) for seed in range(runs)]
    unguarded = [run_guarded(seed, guarded=False, **kw) for seed in range(runs)]
    assert np.mean([o.good_ship for o in guarded]) >= 0.9  # measured 0.965 at 400 runs (scripts/guard_rates.py)
    assert np.mean([o.false_guard_claim for o in unguarded]) >= 0.8  # without the guard: the conflicting head ships
    harmless = dict(kw, family="harmless")
    cost = (np.mean([run_guarded(s, **harmless).good_ship for s in range(runs)])
            - np.mean([run_guarded(s, guarded=False, **harmless).good_ship for s in range(runs)]))
    assert cost >= -0.05  # a guard the heads do not touch costs (almost) no power


def test_where_no_set_keeps_the_guards_the_best_trade_is_named_and_not_shipped(files) -> None:
    from headprune.exporter.resolve import refuse_unconfirmed
    from headprune.report.markdown import verdict_line

    every_head_harms = build_model(passengers={1: 0.2, 2: 0.2, 3: 0.2})  # each head costs the guard ~10 points
    result = find(every_head_harms, cue_task(), guard=f"{files / 'reversed.jsonl'}:margin=5", **SMALL)
    assert result.guarding is not None and not result.guarding.kept
    assert result.guarding.best_trade and not any(t.kept for t in result.guarding.tried)
    assert result.verdict.confirmed and not result.confirmed  # the task gains; the claim does not hold
    line = verdict_line(result)
    assert "no candidate set keeps the guards on discovery" in line and "best trade found is" in line
    assert line.count("\n") == 0
    with pytest.raises(UnconfirmedSetError, match="no candidate set kept the guards"):
        refuse_unconfirmed(result, 1)
