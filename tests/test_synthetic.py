"""The theory experiment: conflicting features concentrate in heads, and ``find`` recovers those heads.

Five seeds are trained with the experiment's own settings (about half a minute each) and taken through
``find`` (task B, task A as control) and ``export``; the analysis that names the heads never runs ``find``.
"""

from __future__ import annotations

import copy
from collections import Counter

import numpy as np
import pytest
import torch

from headprune.synthetic.analysis import HeadScores, head_contributions
from headprune.synthetic.data import combinations, joint_optimum, sample
from headprune.synthetic.experiment import run_seed
from headprune.synthetic.model import Architecture, build_model, build_tokenizer
from headprune.synthetic.report import plot_training, render_report
from headprune.synthetic.train import Settings, answer_ids, encode

SEEDS = (0, 1, 2, 3, 4)


def test_generator_follows_each_rule_and_draws_distinct_inputs() -> None:
    rng = np.random.default_rng(0)
    a, b = sample("A", 1000, rng, distractor_rate=0.2), sample("B", 1000, rng, distractor_rate=0.2)
    assert all(row.answer == row.first for row in a)
    assert all(row.answer == 1 - row.last for row in b)
    assert len({row.prompt for row in a}) == len({row.prompt for row in b}) == 1000
    assert sum(row.first == row.last for row in b) == 200  # stratified: exactly the distractor rate
    assert sum(row.first == row.last for row in a) == 500
    assert 400 < sum(row.answer for row in b[:900]) < 500  # shuffled, not grouped by combination
    with pytest.raises(ValueError, match="distinct"):
        sample("B", 2000, rng)  # 800 agreeing examples per combination, only 8 ** 3 filler sequences


@pytest.mark.parametrize("rate", [0.1, 0.2, 0.35])
def test_joint_optimum_matches_the_posterior_of_the_mixture(rate: float) -> None:
    # Count, over both tasks' (first, last, answer) probabilities, how often a contradicting input's answer is
    # its first symbol: that frequency is what the best predictor must output.
    mass: Counter = Counter()
    for task in ("A", "B"):
        for first, last, answer, weight in combinations(task, rate):
            if first == last:
                mass[answer == first] += 0.5 * weight
    assert joint_optimum(rate).p_first == pytest.approx(mass[True] / (mass[True] + mass[False]))
    optimum = joint_optimum(rate)
    assert optimum.accuracy_b == pytest.approx(1 - rate)
    assert 0 < optimum.loss_a < np.log(2) and 0 < optimum.loss_b < np.log(2)


def test_head_contributions_match_each_head_removed_by_hand() -> None:
    tokenizer = build_tokenizer()
    model = build_model(Architecture(init_std=0.3), len(tokenizer), seed=3)
    rows = sample("A", 16, np.random.default_rng(1))
    ids = encode(tokenizer, rows)
    a, b = answer_ids(tokenizer)
    contributions = head_contributions(model, ids, (a, b))  # (16, heads)

    def residual(m: torch.nn.Module) -> torch.Tensor:
        return m(input_ids=ids, output_hidden_states=True).hidden_states[-1]  # after ln_f in GPT-2

    captured = {}
    handle = model.transformer.ln_f.register_forward_pre_hook(lambda _m, args: captured.update(r=args[0][:, -1]))
    with torch.no_grad():
        model(input_ids=ids)
    handle.remove()
    full = captured["r"]
    scale = torch.sqrt(full.var(-1, unbiased=False) + model.transformer.ln_f.eps)
    direction = model.transformer.ln_f.weight * (model.lm_head.weight[a] - model.lm_head.weight[b])
    d = model.config.n_embd // model.config.n_head
    for h in range(model.config.n_head):
        without = copy.deepcopy(model)
        with torch.no_grad():
            without.transformer.h[0].attn.c_proj.weight[h * d:(h + 1) * d] = 0  # Conv1D: rows are inputs
        handle = without.transformer.ln_f.register_forward_pre_hook(lambda _m, args: captured.update(r=args[0][:, -1]))
        with torch.no_grad():
            without(input_ids=ids)
        handle.remove()
        written = full - captured["r"]
        expected = ((written - written.mean(-1, keepdim=True)) @ direction) / scale
        torch.testing.assert_close(contributions[:, h], expected, rtol=1e-4, atol=1e-5)


def test_conflict_heads_are_the_fewest_holding_most_of_the_positive_score() -> None:
    scores = HeadScores(first=[0.0] * 4, last=[0.0] * 4, conflict=[0.5, -2.0, 3.0, 0.2])
    assert scores.conflict_heads() == [2]  # 3.0 of 3.7 is 81%
    assert scores.conflict_heads(share=0.9) == [2, 0]
    assert scores.conflict_share([2, 0]) == pytest.approx(3.5 / 3.7)
    assert HeadScores([0.0], [0.0], [-1.0]).conflict_heads() == []


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> list[tuple]:
    root = tmp_path_factory.mktemp("theory")
    return [(root / f"seed-{seed}", run_seed(Settings(seed=seed), root / f"seed-{seed}")) for seed in SEEDS]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(SEEDS)))
def test_theory_seed(seeds: list[tuple], index: int) -> None:
    _, record = seeds[index]
    optimum = record["optimum"]
    # Training reaches the joint objective's optimum, which is low on both tasks and loses B's contradicting
    # examples by construction.
    assert record["loss"]["joint"] <= optimum["joint"] + 0.03
    assert max(record["loss"]["A"], record["loss"]["B"]) < 0.35  # chance is ln 2 = 0.69
    assert record["accuracy"]["A"] >= 0.99
    assert record["accuracy"]["B"] == pytest.approx(optimum["accuracy_b"], abs=0.02)
    # The analysis finds the conflicting feature concentrated in few of the four heads.
    named = record["conflict_heads"]
    assert 1 <= len(named) <= 2
    # find on B (never told about the analysis) returns a set containing the head that carries most of the
    # conflict (all of it, where the analysis names one head); removal is confirmed on held-out B and costs A.
    assert named[0] in record["found_heads"], (named, record["found_heads"])
    heldout = record["heldout_b"]
    assert heldout["confirmed"] and heldout["difference"] >= 0.1, heldout
    control = record["control_a"]
    assert control["difference"] <= -0.1 and control["ci95"][1] < 0, control
    assert record["exported"] is not None  # export re-verified the set and wrote the pruned checkpoint


@pytest.mark.slow
def test_find_sets_contain_every_named_head_in_most_seeds(seeds: list[tuple]) -> None:
    # Where the conflict is split over two heads, removing the stronger one can already fix every B example;
    # find then keeps the smaller set (seed 4: named H0 71% + H3 29%, found H0). Measured: 4 of 5 seeds.
    assert sum(record["found_contains_named"] for _, record in seeds) >= 4


@pytest.mark.slow
def test_theory_report_and_figures(seeds: list[tuple], tmp_path) -> None:  # noqa: ANN001
    folders, records = [f for f, _ in seeds], [r for _, r in seeds]
    figures = plot_training(folders, records, tmp_path)
    assert all(path.stat().st_size > 10_000 for path in figures)
    report = render_report(records, figures)
    rows = {line.split("|")[1].strip(): line for line in report.splitlines() if line.startswith("| ")}
    for record in records:
        contains = rows[str(record["seed"])].split("|")[7].strip()
        assert contains == ("yes" if record["found_contains_named"] else "NO")
