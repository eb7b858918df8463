"""The text guard's test, size and power: how often it accepts a change exactly at the margin (numpy, about 3 min).

A text guard accepts when the upper end of its interval of the mean per-example NLL change lies below the margin
(``headprune.search.skewed_mean``). Its size is largest at the null's boundary, where the true mean change *is* the
margin; the tests are location-scale invariant, so a family's shape and ``n`` decide the size, not its scale. For
each family of changes (:data:`FAMILIES`: skewed, heavy-tailed, changes carried by a few texts, and the symmetric and
left-skewed cases) and each held-out size (:data:`SIZES`: from below the least a text guard may use,
``MIN_TEXTS``, to far above ``general``'s 400), ``--draws`` samples are drawn at the boundary and the share each test
accepts is recorded, for

- ``now``: find's test (:func:`headprune.search.skewed_mean.mean_bounds`: Hall's correction, one-sided, weight 2);
- ``hall``: the test of headprune 0.3 (Hall's correction with the signed sample skewness, weight 1);
- ``t``: the plain paired t test;
- ``bootstrap``: the studentized bootstrap (999 resamples; fewer draws, ``--bootstrap-draws``, at three sizes).

Power: the share accepted where the true change lies below the margin (half of it, and 0.8 of it) with a spread of
one margin, for the shapes real NLL changes take (normal, gamma of skewness 2, lognormal of skewness 1.8).

    python scripts/guard_size.py [--draws 20000] [--json docs/bench/guard-size.json]
    python scripts/guard_size.py --draws 100000 --sizes 3000 --families "Pareto tail, index 2.5 (infinite)" \
        --bootstrap-draws 0 --no-power      # one cell, closer

docs/find.md's tables are this record rendered by ``python -m scripts.bench.render``.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable

import numpy as np

from headprune.search.effects import t_quantile
from headprune.search.skewed_mean import hall_inverse, mean_bounds

ALPHA = 0.05  # two-sided: each test is one-sided at 2.5%
SIZES = (30, 50, 100, 160, 267, 400, 1000, 3000)
POWER_SIZES = (100, 160, 400, 1000)
BOOTSTRAP_SIZES = (30, 100, 400)  # the studentized bootstrap costs 999 resamples a draw: three sizes
Draw = Callable[[np.random.Generator, tuple[int, int]], np.ndarray]


def _standard(sample: Callable[[np.random.Generator, tuple[int, int]], np.ndarray], mean: float, sd: float) -> Draw:
    """``sample`` moved to mean 0 and scaled to standard deviation 1."""
    return lambda rng, shape: (sample(rng, shape) - mean) / sd


def _rare(share: float, shift: float = 10.0) -> Draw:
    """A standard normal change plus ``shift`` on a ``share`` of texts (a few texts move a lot), standardised."""
    sd = math.sqrt(1 + shift**2 * share * (1 - share))
    return lambda rng, shape: (rng.standard_normal(shape) + shift * (rng.random(shape) < share) - shift * share) / sd


def _lognormal(sigma: float) -> Draw:
    mean, variance = math.exp(sigma**2 / 2), (math.exp(sigma**2) - 1) * math.exp(sigma**2)
    return _standard(lambda rng, s: rng.lognormal(0.0, sigma, s), mean, math.sqrt(variance))


def _pareto(index: float) -> Draw:  # numpy's pareto is the Lomax: P(X > x) = (1 + x)^-index
    variance = index / ((index - 1) ** 2 * (index - 2))
    return _standard(lambda rng, s: rng.pareto(index, s), 1 / (index - 1), math.sqrt(variance))


def _gamma(shape: float, sign: float = 1.0) -> Draw:
    return _standard(lambda rng, s: sign * rng.gamma(shape, 1.0, s), sign * shape, math.sqrt(shape))


# Each family standardised (mean 0: the boundary once the margin is added; standard deviation 1), its skewness in
# its name.
FAMILIES: dict[str, Draw] = {
    "normal (0)": _standard(lambda rng, s: rng.standard_normal(s), 0.0, 1.0),
    "gamma, shape 1 (2)": _gamma(1.0),
    "gamma, shape 0.5 (2.8)": _gamma(0.5),
    "gamma, shape 0.25 (4)": _gamma(0.25),
    "lognormal, sigma 0.5 (1.8)": _lognormal(0.5),
    "lognormal, sigma 1 (6.2)": _lognormal(1.0),
    "lognormal, sigma 1.25 (13.1)": _lognormal(1.25),
    "Pareto tail, index 4 (7.1)": _pareto(4.0),
    "Pareto tail, index 3 (infinite)": _pareto(3.0),
    "Pareto tail, index 2.5 (infinite)": _pareto(2.5),
    "t, 3 degrees of freedom (0)": _standard(lambda rng, s: rng.standard_t(3.0, s), 0.0, math.sqrt(3.0)),
    "5% of texts move 10 sd (3.1)": _rare(0.05),
    "2% of texts move 10 sd (3.7)": _rare(0.02),
    "left-skewed gamma, shape 0.5 (-2.8)": _gamma(0.5, -1.0),
}
POWER_SHAPES = ("normal (0)", "gamma, shape 1 (2)", "lognormal, sigma 0.5 (1.8)")


def _moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: the mean, the standard deviation (n - 1) and the plug-in sample skewness."""
    n = x.shape[-1]
    mean = x.mean(-1)
    deviation = x - mean[:, None]
    m2 = (deviation**2).mean(-1)
    skew = np.where(m2 > 0, (deviation**3).mean(-1) / np.maximum(m2, 1e-300) ** 1.5, 0.0)
    return mean, np.sqrt(m2 * n / (n - 1)), skew


def accepts(x: np.ndarray, margin: float) -> dict[str, np.ndarray]:
    """Per row of ``x`` (one sample of per-example changes each), whether each closed-form test accepts."""
    n = x.shape[-1]
    mean, spread, skew = _moments(x)
    z = t_quantile(1 - ALPHA / 2, n - 1)
    step = spread / math.sqrt(n)
    hall_upper = mean - hall_inverse(-z, skew / (6 * math.sqrt(n))) * step  # 0.3: signed skewness, weight 1
    return {"now": mean_bounds(mean, spread, skew, n, alpha=ALPHA)[1] < margin, "hall": hall_upper < margin,
            "t": mean + z * step < margin}


def bootstrap_accepts(x: np.ndarray, margin: float, rng: np.random.Generator, resamples: int = 999) -> np.ndarray:
    """The studentized bootstrap's upper bound (the lower 2.5% quantile of the resampled t) below ``margin``."""
    n = x.shape[-1]
    out = np.empty(len(x), dtype=bool)
    mean, spread, _ = _moments(x)
    for i, row in enumerate(x):
        again = row[rng.integers(0, n, (resamples, n))]
        spread_again = again.std(-1, ddof=1)
        t = math.sqrt(n) * (again.mean(-1) - mean[i]) / np.where(spread_again > 0, spread_again, np.inf)
        out[i] = mean[i] - np.quantile(t, ALPHA / 2) * spread[i] / math.sqrt(n) < margin
    return out


def rates(draw: Draw, n: int, draws: int, rng: np.random.Generator, *, shift: float = 0.0) -> dict[str, float]:
    """The share of ``draws`` samples of ``n`` changes (``draw`` plus ``shift``, against a margin of 0) each test
    accepts: at the boundary with ``shift`` 0 (size), below the margin with ``shift`` < 0 (power)."""
    counts: dict[str, int] = {}
    done = 0
    while done < draws:
        chunk = min(draws - done, max(1, 4_000_000 // n))
        for name, accepted in accepts(draw(rng, (chunk, n)) + shift, 0.0).items():
            counts[name] = counts.get(name, 0) + int(accepted.sum())
        done += chunk
    return {name: count / draws for name, count in counts.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=20000)
    parser.add_argument("--bootstrap-draws", type=int, default=1000, help="0: no bootstrap column")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="held-out sizes, comma-separated")
    parser.add_argument("--families", default=";".join(FAMILIES), help="families, semicolon-separated")
    parser.add_argument("--no-power", action="store_true", help="sizes only")
    parser.add_argument("--json", default=None, help="write the record here")
    args = parser.parse_args(argv)
    started, rng = time.perf_counter(), np.random.default_rng(2026)
    size = []
    for family in args.families.split(";"):
        draw = FAMILIES[family]
        for n in map(int, args.sizes.split(",")):
            row = {"family": family, "n": n, **rates(draw, n, args.draws, rng)}
            if args.bootstrap_draws and n in BOOTSTRAP_SIZES:
                row["bootstrap"] = float(bootstrap_accepts(draw(rng, (args.bootstrap_draws, n)), 0.0, rng).mean())
            size.append(row)
            print(json.dumps(row), flush=True)
    power = []
    for family in () if args.no_power else POWER_SHAPES:
        for distance in (0.5, 0.2):  # (margin - true change) / spread: a change of half the margin, and of 0.8
            for n in POWER_SIZES:  # the spread is one margin: the shift is -distance spreads
                row = {"family": family, "distance": distance, "n": n,
                       **rates(FAMILIES[family], n, args.draws, rng, shift=-distance)}
                power.append(row)
                print(json.dumps(row), flush=True)
    record = {"bench": "guard_size", "draws": args.draws, "bootstrap_draws": args.bootstrap_draws, "alpha": ALPHA,
              "size": size, "power": power, "seconds": round(time.perf_counter() - started, 1)}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=1)
            handle.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
