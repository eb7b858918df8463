"""The whole pipeline's error rates: how often ``find`` confirms an improvement that is not there, and how
often it confirms one that is.

Everything runs end to end through :func:`headprune.search.find.find` (halves, screen, joint search, selection,
finalists, held-out verdict) on tiny Llamas built here in code, where a run takes seconds:

- The model: one layer of ``--heads`` heads (head_dim 4) over a 16-dimensional residual stream, MLP off. Each
  prompt is one token ``x{c}_{k}`` whose embedding carries a cue ``c = +-1`` and a per-token nuisance value;
  the unembedding reads the cue plus 0.3 times the nuisance for `` A`` and the negative for `` B``. Head 0 (the
  *planted* head) copies the cue and writes ``-harm`` times it back: it pushes every answer away from the cue.
  Every other head copies the nuisance and writes it into the cue direction with a random strength
  (normal, sd 0.05): removing one flips answers near the boundary.
- **Null tasks** (the false-confirmation rate), two kinds. ``random``: labels drawn at random, independent of
  the model. ``surface``: the harder null: labels follow the cue on even tokens and oppose it on odd ones, so
  every head that moves the cue (the planted head most) changes many answers in both directions, equally on
  discovery and held-out, with no net effect. Whatever find confirms on either is false. Each task has its own
  model, labels and split, from three independent random streams of the run's seed. A run counts as a false
  confirmation when its primary set is confirmed.
- **What a correct pipeline would show**: the verdict confirms when rescued > damaged and the two-sided exact
  McNemar p < alpha. Given a null primary's held-out discordant count D, a correct test confirms with
  probability e(D) = P(X >= c(D)), X ~ Binomial(D, 1/2), c(D) the test's critical count (0 when D is too small
  to ever reject: below 6 at alpha 0.05). The expected rate is the mean of e(D) over the tasks; the measured
  rate is printed beside it with its exact 95% interval, and whether that interval excludes twice the expected
  rate (the sample is large enough to see a twofold inflation).
- **Power**: the task labels by the cue with each label flipped with probability ``--flip``, so removing the
  planted head rescues examples on most tokens and damages them where the label was flipped. Its true effect
  is computed on the whole population of tokens of the model. Power is the share of runs whose primary set is
  confirmed *and* contains the planted head, at each held-out size.

Search settings are find's defaults (nominees 10, here capped at the model's 8 heads; max heads 3; finalists
10; alpha 0.05; exact screen); discovery is scaled down to 300 (the search's chance to find something on
discovery falls with its size, so this is if anything the harder case), held-out is find's default, 1,000.

    python scripts/error_rates.py [--null-tasks 400] [--power-runs 30] [--heldout-sizes 300,1000]
        [--discovery 300] [--heldout 1000] [--heads 8] [--harm 0.2] [--flip 0.3] [--seed 0] [--json FILE]
"""

from __future__ import annotations

import argparse
import logging
import math
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch

from headprune.heads import Head
from headprune.search.find import find
from headprune.tasks import Example, Task
from headprune.testing import cue_llama

NULL_HEAD_SD = 0.05


def build_model(seed: int, *, heads: int = 8, harm: float = 0.2, tokens: int = 1500,  # noqa: ANN201
                null_sd: float = NULL_HEAD_SD):
    """The tiny Llama described above, as a LoadedModel; ``tokens`` per cue (2 * tokens examples); ``null_sd``
    the standard deviation of the other heads' strengths."""
    from headprune.loading.models import wrap_model

    model, tokenizer = cue_llama(heads, tokens, generator := torch.Generator().manual_seed(seed))
    strengths = torch.randn(heads, generator=generator) * null_sd
    with torch.no_grad():
        layer = model.model.layers[0]
        attention = layer.self_attn
        attention.v_proj.weight[0, 0] = 1.0  # the planted head copies the cue ...
        attention.o_proj.weight[0, 0] = -harm  # ... and writes it back negated
        for h in range(1, heads):  # the others copy the nuisance into the cue direction
            attention.v_proj.weight[4 * h, 1] = 1.0
            attention.o_proj.weight[0, 4 * h] = strengths[h]
    return wrap_model(model, tokenizer, name=f"error-rates-{seed}")


def build_task(seed: int, *, tokens: int = 1500, flip: float | None = None, surface: bool = False) -> Task:
    """``flip`` None: a null task, its labels random (or, with ``surface``, the cue's on even tokens and the
    opposite on odd ones); else labels by the cue, each flipped with probability ``flip``."""
    rng = random.Random(seed)
    examples = []
    for k in range(tokens):
        for c, name in ((1, "p"), (-1, "n")):
            by_cue = 0 if c > 0 else 1
            if flip is not None:
                answer = by_cue ^ (rng.random() < flip)
            else:
                answer = by_cue ^ (k % 2) if surface else rng.randrange(2)
            examples.append(Example(f"x{name}_{k}", prompt=f"x{name}_{k}", choices=(" A", " B"), answer=answer))
    return Task("null" if flip is None else "cue", "choice", tuple(examples))


def streams(seed: int, index: int) -> tuple[int, int, int]:
    """Independent seeds for one run's model, labels and split (numpy's SeedSequence children)."""
    children = np.random.SeedSequence([seed, index]).spawn(3)
    return tuple(int(child.generate_state(1)[0]) for child in children)  # type: ignore[return-value]


def correct_rate(discordant: int, alpha: float) -> float:
    """The probability that a correct pipeline confirms a set with no effect and ``discordant`` held-out pairs."""
    from headprune.search.binomial import upper_tail
    from headprune.search.score import mcnemar_critical

    critical = mcnemar_critical(discordant, alpha)
    return upper_tail(critical, discordant) if critical <= discordant else 0.0


def planted_effect(*, heads: int, harm: float, flip: float, models: int = 5, tokens: int = 5000) -> float:
    """The planted head's true effect: the expected accuracy change of removing it, over the models (nuisance
    draws and other heads' strengths) and labels the power runs draw from, estimated on ``models`` models of
    ``2 * tokens`` examples each (Monte-Carlo error well below a tenth of a point)."""
    from headprune.evaluation import Evaluator

    effects = []
    for seed in range(10**6, 10**6 + models):
        lm = build_model(seed, heads=heads, harm=harm, tokens=tokens)
        evaluator = Evaluator(lm, build_task(seed, tokens=tokens, flip=0.0), batch_size=1024)
        before, after = evaluator.run().correct, evaluator.run([Head(0, 0)]).correct
        effects.append(float((~before & after).mean()) - float((before & ~after).mean()))
    return (1 - 2 * flip) * sum(effects) / len(effects)  # a flipped label turns a rescue into damage and back


def clopper_pearson_upper(k: int, n: int, level: float = 0.95) -> float:
    """Exact one-sided upper confidence bound for a binomial proportion (bisection on the tail)."""
    def lower_tail(p: float) -> float:
        return sum(math.comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k + 1))

    if k >= n:
        return 1.0
    low, high = k / n, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        low, high = (mid, high) if lower_tail(mid) > 1 - level else (low, mid)
    return high


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact two-sided interval: each end the one-sided bound at (1 + level) / 2."""
    one_sided = (1 + level) / 2
    return (0.0 if k == 0 else 1 - clopper_pearson_upper(n - k, n, one_sided)), clopper_pearson_upper(k, n, one_sided)


@dataclass(frozen=True)
class Rate:
    label: str
    runs: int
    hits: int
    upper95: float
    seconds: float
    which: tuple[int, ...] = ()  # the runs that counted
    best_of_finalists: int | None = None  # null tasks read the wrong way: any finalist p < alpha, gain > 0
    expected: float | None = None  # null tasks: the rate a correct pipeline shows at their discordant counts
    discordant: tuple[int, ...] = ()  # null tasks: each primary set's held-out discordant count
    interval95: tuple[float, float] | None = None  # exact two-sided 95% interval of the rate

    @property
    def rate(self) -> float:
        return self.hits / self.runs if self.runs else float("nan")


def null_rate(tasks: int, *, seed: int, discovery: int, heldout: int, heads: int, alpha: float = 0.05,
              surface: bool = False, settings: dict | None = None) -> Rate:
    """False confirmations over ``tasks`` null tasks, each through find with its own model, labels and split."""
    started, which, wrong, discordant = time.perf_counter(), [], 0, []
    tokens = (discovery + heldout) // 2 + 1
    for index in range(tasks):
        model_seed, label_seed, split_seed = streams(seed + (7919 if surface else 0), index)
        lm = build_model(model_seed, heads=heads, tokens=tokens)
        result = find(lm, build_task(label_seed, tokens=tokens, surface=surface), discovery=discovery,
                      heldout=heldout, seed=split_seed % 2**31, alpha=alpha, batch_size=512, **(settings or {}))
        if result.confirmed:
            which.append(index)
        wrong += any(f.heldout.p_value < alpha and f.heldout.difference > 0 for f in result.finalists)
        discordant.append(result.verdict.rescued + result.verdict.damaged)
    expected = sum(correct_rate(d, alpha) for d in discordant) / tasks
    return Rate(f"{'surface' if surface else 'random'} null (discovery {discovery}, held-out {heldout})", tasks,
                len(which), clopper_pearson_upper(len(which), tasks), time.perf_counter() - started, tuple(which),
                wrong, expected, tuple(discordant), clopper_pearson(len(which), tasks))


def power(runs: int, heldout: int, *, seed: int, discovery: int, heads: int, harm: float, flip: float,
          alpha: float = 0.05, settings: dict | None = None) -> Rate:
    """Runs whose primary set is confirmed and contains the planted head, at one held-out size."""
    started, hits = time.perf_counter(), 0
    tokens = (discovery + heldout) // 2 + 1
    for index in range(runs):
        model_seed, label_seed, split_seed = streams(seed + 104_729, index)
        lm = build_model(model_seed, heads=heads, harm=harm, tokens=tokens)
        result = find(lm, build_task(label_seed, tokens=tokens, flip=flip), discovery=discovery, heldout=heldout,
                      seed=split_seed % 2**31, alpha=alpha, batch_size=512, **(settings or {}))
        hits += result.confirmed and "L0.H0" in result.finalists[0].heads
    return Rate(f"power at held-out {heldout}", runs, hits, clopper_pearson_upper(hits, runs),
                time.perf_counter() - started)


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--null-tasks", type=int, default=400, help="null tasks of each kind (random, surface)")
    parser.add_argument("--power-runs", type=int, default=30)
    parser.add_argument("--heldout-sizes", default="300,1000")
    parser.add_argument("--discovery", type=int, default=300)
    parser.add_argument("--heldout", type=int, default=1000)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--harm", type=float, default=0.2)
    parser.add_argument("--flip", type=float, default=0.3)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--effect-tokens", type=int, default=5000,
                        help="tokens per cue of each of the 5 models the true effect is measured on")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (tiny models: 1 is fastest)")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    logger, threads = logging.getLogger("headprune"), torch.get_num_threads()
    level = logger.level
    torch.set_num_threads(args.threads)
    logger.setLevel(logging.WARNING)
    try:  # called in-process by the tests: leave the logger and torch's threads as they were
        return _measure(args)
    finally:
        logger.setLevel(level)
        torch.set_num_threads(threads)


def _measure(args: argparse.Namespace) -> dict:
    figures: dict = {"settings": vars(args)}
    if args.null_tasks:
        figures["null"] = {}
        for surface in (False, True):
            null = null_rate(args.null_tasks, seed=args.seed, discovery=args.discovery, heldout=args.heldout,
                             heads=args.heads, alpha=args.alpha, surface=surface)
            low, high = null.interval95 or (0.0, 1.0)
            twofold = high < 2 * (null.expected or 0.0)
            print(f"{null.label}, {args.heads} heads, alpha {args.alpha}: false confirmations {null.hits}/{null.runs} "
                  f"= {null.rate:.4f} (exact 95% interval [{low:.4f}, {high:.4f}]); a correct pipeline at these "
                  f"primaries' held-out discordant counts (median {int(np.median(null.discordant))}, quartiles "
                  f"{int(np.percentile(null.discordant, 25))}-{int(np.percentile(null.discordant, 75))}) would show "
                  f"{null.expected:.4f}; the interval {'excludes' if twofold else 'does NOT exclude'} a twofold "
                  f"inflation ({2 * (null.expected or 0):.4f}); read the wrong way (any finalist, chosen after held-out): "
                  f"{null.best_of_finalists}/{null.runs}; {null.seconds:.0f} s", flush=True)
            figures["null"]["surface" if surface else "random"] = {**asdict(null), "rate": null.rate,
                                                                  "excludes_twofold": twofold}
    sizes = [int(s) for s in args.heldout_sizes.split(",") if s] if args.power_runs else []
    if sizes:
        effect = planted_effect(heads=args.heads, harm=args.harm, flip=args.flip, tokens=args.effect_tokens)
        print(f"planted head L0.H0: harm {args.harm}, label noise {args.flip}: true accuracy effect of removing it "
              f"{effect:+.2%} (5 models x {2 * args.effect_tokens:,} examples)", flush=True)
        figures["effect"], figures["power"] = effect, []
        for size in sizes:
            rate = power(args.power_runs, size, seed=args.seed, discovery=args.discovery, heads=args.heads,
                         harm=args.harm, flip=args.flip, alpha=args.alpha)
            print(f"power at held-out {size}: {rate.hits}/{rate.runs} = {rate.rate:.2f} confirmed with the planted "
                  f"head in the primary set ({rate.seconds:.0f} s)", flush=True)
            figures["power"].append({**asdict(rate), "heldout": size, "rate": rate.rate})
    if args.json:
        from pathlib import Path

        from headprune.core.io import atomic_write_json

        atomic_write_json(Path(args.json), figures)
    return figures


if __name__ == "__main__":
    main()
