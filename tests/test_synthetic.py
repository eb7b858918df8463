"""The theory experiment: conflicting features concentrate in heads, and ``find`` recovers those heads.

Five seeds are trained with the experiment's own settings (about half a minute each; kept between runs by
``helpers.theory_cache``, keyed on the code that trains them) and taken through ``find`` (task B, task A as
control) and ``export``; the analysis that names the heads never runs ``find``.
The outcome must not depend on the CPU: two tests rerun parts under other kernels (``ATEN_CPU_CAPABILITY``).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import subprocess
import sys
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
from helpers import theory_cache

SEEDS = (0, 1, 2, 3, 4)
THEORY = pytest.mark.xdist_group("theory")  # one worker builds the seeds (scripts/test.sh: --dist loadgroup)
SENSITIVE_SEED = 4  # the seed whose training magnifies small differences most (measured)


def run_python(code: str, *, other_kernels: bool) -> str:
    """Run ``code`` in a fresh interpreter, with this process's CPU kernels or with other ones.

    Other kernels are torch's scalar ones where this CPU gets vectorised ones (AVX2, AVX-512), else AVX2's
    (where the CPU lacks AVX2 the subprocess falls back to the same scalar kernels: nothing else to compare).
    """
    env = dict(os.environ)
    if other_kernels:
        env["ATEN_CPU_CAPABILITY"] = "default" if torch.backends.cpu.get_cpu_capability() != "DEFAULT" else "avx2"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


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


INITIAL_WEIGHTS = """
import hashlib, json
from headprune.synthetic.model import Architecture, build_model, build_tokenizer
size = len(build_tokenizer())
print(json.dumps([hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in
                                          build_model(Architecture(), size, seed).parameters())).hexdigest()
                  for seed in range(3)]))
"""


def test_initialisation_is_the_same_with_other_cpu_kernels() -> None:
    # torch's normal_ draws differ slightly between its scalar and AVX2 kernels, and training from small
    # initialisation magnifies that into another model: the initial weights must not depend on the kernels.
    # This process has its own kernels: only the other kernels need a fresh interpreter.
    here = io.StringIO()
    with contextlib.redirect_stdout(here):
        exec(INITIAL_WEIGHTS, {})  # noqa: S102 - the same source the other interpreter runs
    assert run_python(INITIAL_WEIGHTS, other_kernels=True) == here.getvalue()


def test_conflict_heads_are_the_fewest_holding_most_of_the_positive_score() -> None:
    scores = HeadScores(first=[0.0] * 4, last=[0.0] * 4, conflict=[0.5, -2.0, 3.0, 0.2])
    assert scores.conflict_heads() == [2]  # 3.0 of 3.7 is 81%
    assert scores.conflict_heads(share=0.9) == [2, 0]
    assert scores.conflict_share([2, 0]) == pytest.approx(3.5 / 3.7)
    assert HeadScores([0.0], [0.0], [-1.0]).conflict_heads() == []


@pytest.fixture(scope="module")
def seeds(tmp_path_factory: pytest.TempPathFactory) -> list[tuple]:
    root = tmp_path_factory.mktemp("theory")
    return [(root / f"seed-{seed}", run_seed(Settings(seed=seed), root / f"seed-{seed}",
                                             trained=theory_cache.trained(Settings(seed=seed)))) for seed in SEEDS]


@pytest.mark.slow
@THEORY
@pytest.mark.parametrize("index", range(len(SEEDS)))
def test_theory_seed(seeds: list[tuple], index: int) -> None:
    _, record = seeds[index]
    optimum = record["optimum"]
    # Training settles at the joint objective's optimum (measured: 0.0003 nats above it in every seed), which is
    # low on both tasks and loses B's contradicting examples by construction.
    assert record["loss"]["joint"] <= optimum["joint"] + 0.002
    assert record["loss"]["A"] == pytest.approx(optimum["loss_a"], abs=0.01)
    assert record["loss"]["B"] == pytest.approx(optimum["loss_b"], abs=0.01)
    assert record["accuracy"]["A"] >= 0.99
    assert record["accuracy"]["B"] == pytest.approx(optimum["accuracy_b"], abs=0.02)
    # The analysis finds the conflicting feature in some of the four heads, never all (measured: one head in
    # seed 1, two in seeds 2 and 3, three in seeds 0 and 4).
    named = record["conflict_heads"]
    assert 1 <= len(named) < record["settings"]["architecture"]["heads"]
    # find on B (never told about the analysis) returns a set whose removal is confirmed on held-out B
    # (measured: +10 to +21 points) and costs A (-22 to -49); which heads, across seeds, is checked below.
    heldout = record["heldout_b"]
    assert heldout["confirmed"] and heldout["difference"] >= 0.08, heldout
    control = record["control_a"]
    assert control["difference"] <= -0.1 and control["interval"][1] < 0, control
    assert record["exported"] is not None  # export re-verified the set and wrote the pruned checkpoint


@pytest.mark.slow
@THEORY
def test_find_sets_hold_most_of_the_conflict(seeds: list[tuple]) -> None:
    # Where the conflict is spread over three heads, removing two of them already fixes B's contradicting
    # examples, so find (at most two heads) returns fewer than the analysis names; its set still holds most of
    # the positive conflict score (measured: 65% to 87%), where two heads at random would hold half on average.
    # find ranks equal gains by fewer damaged, then fewer heads (the protocol's tie-break), then margin: in seed
    # 3 a single head the analysis does not name (L0.H1, 8% of the conflict) rescues all 27 of B's contradicting
    # discovery examples, as the two named heads do together, and wins the tie on size. Measured: the strongest
    # named head in 4 of the 5 seeds.
    shares = [HeadScores(**record["scores"]).conflict_share(record["found_heads"]) for _, record in seeds]
    strongest = [record["conflict_heads"][0] in record["found_heads"] for _, record in seeds]
    assert sum(strongest) >= 4, strongest
    assert sorted(shares)[1] >= 0.6, shares  # every seed but at most one


@pytest.mark.slow
@THEORY
def test_training_ends_in_the_same_place_with_other_cpu_kernels(seeds: list[tuple]) -> None:
    # Different kernels round differently, and the emergence of the features from small initialisation magnifies
    # rounding: with the first version's float32 steps of 0.5, another CPU meant other heads. The seed that
    # magnifies most (a relative difference of 1e-13 in its initial weights grows to 1e-2 in the trained ones),
    # trained again with other kernels, must give the same heads and nearly the same scores (measured: within
    # 0.03 with scalar, AVX2 and AVX-512 kernels) and losses.
    code = ("import json; from dataclasses import asdict; from headprune.synthetic.train import Settings, train; "
            f"print(json.dumps(asdict(train(Settings(seed={SENSITIVE_SEED})).final)))")
    final = json.loads(run_python(code, other_kernels=True))
    record = seeds[SEEDS.index(SENSITIVE_SEED)][1]
    assert HeadScores(final["first"], final["last"], final["conflict"]).conflict_heads() == record["conflict_heads"]
    assert final["conflict"] == pytest.approx(record["scores"]["conflict"], abs=0.05)
    assert final["loss_a"] == pytest.approx(record["loss"]["A"], abs=1e-3)
    assert final["loss_b"] == pytest.approx(record["loss"]["B"], abs=1e-3)


@pytest.mark.slow
@THEORY
def test_theory_report_and_figures(seeds: list[tuple], tmp_path) -> None:  # noqa: ANN001
    folders, records = [f for f, _ in seeds], [r for _, r in seeds]
    figures = plot_training(folders, records, tmp_path)
    assert all(path.stat().st_size > 10_000 for path in figures)
    report = render_report(records, figures)
    rows = {line.split("|")[1].strip(): line for line in report.splitlines() if line.startswith("| ")}
    for record in records:
        contains = rows[str(record["seed"])].split("|")[7].strip()
        assert contains == ("yes" if record["found_contains_named"] else "NO")
