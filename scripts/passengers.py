"""find's selection error rates and power on counts-only models, through its own search code (seconds a thousand runs).

Tables comparing find's rule with earlier ones through the same code (``headprune.search.simulation``), each rule on
the same models (seeds 0 to runs - 1):

- **improve**: per cell, the share of runs whose primary set holds a passenger (a null head in a set of several
  heads), the share that keep *every* real head in the primary set (confirmed or not), the share confirmed with
  every real head, the share of false confirmations (a confirmed primary set with a null head, or with no true
  gain), and the expected true gain confirmed (points: the true gain of the primary set where it is confirmed, 0
  where not). Cells: two sizes, discovery/held-out 2,000/1,000 with real heads of +0.6 points (0.8% rescued, 0.2%
  damaged) and 150/300 with real heads of +7.5 points (7.8% rescued, 0.3% damaged, the size of the main job's
  L11.H8); 0, 1 or 2 real heads, an interacting pair (a head of that size whose partner helps only once it is
  removed, by as much again), two heads that improve the task only together, or ``null first``; null heads flipping
  0.1%-5% of answers; find's defaults (``--extend 1``),
  ``--extend 0`` and ``--extend 2``, and the main job's search settings (``--nominees 3 --max-heads 2
  --finalists 2``); 18 heads (2 layers of 9). An adversarial family among them, ``2 exclusive``: two real heads
  among exactly null heads (each example toggled by at most one head, so no toggle cancels a null head's own).
  find's rule alone (the first of ``--rules``): the rules are compared in the power table.
- **power**: the cells that decide, at find's defaults and more runs a cell (``--power-runs``): one or two real heads,
  two among exact nulls, an interacting pair, two acting only together and ``null first`` (two real heads and a null
  head the search half ranks first) at null flips of 0.3%, one real head at 3% and 5%, no real head at 1-5%; each
  rule of ``--rules`` on the same models (any registered selection rule that runs, ``headprune.search.rules``:
  find's, ``fallback``; ``sequence``, the fixed sequence it replaced; ``admission``, 0.2's, heads admitted on the
  check half alone; ``same``, 0.1.0's, all on discovery), with the share of runs whose proposal orders a null head
  ahead of a real one; and ``lucky null`` (no real head, every head exactly null but one that the search half ranks
  first) at flips of 3%: the steps' size where a null head leads them.
- **masked**: the held-out stage alone on a fixed proposal of redundant and masked heads, whose kept set gains
  nothing while the proposal gains (``headprune.search.simulation.run_masked``); find's rule only.
- **compress**: the share of runs accepted on held-out and the share of accepted sets whose true drop exceeds
  the budget, at budgets 0.5, 1 and 2 points (36 heads, 40% harmless); ``held-out``: find's budget (discovery
  judged as the held-out test will judge it), ``estimate``: the discovery estimate alone.

    python scripts/passengers.py [--runs 400] [--power-runs 1000] [--compress-runs 3000] [--rules fallback,sequence]
        [--json FILE]

docs/find.md's tables are this record (docs/bench/passengers.json) rendered by ``python -m scripts.bench.render``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file from a checkout
from headprune.search.find_result import FindSettings  # noqa: E402
from headprune.search.rules import FIND_RULE, RULES  # noqa: E402
from headprune.search.simulation import FAMILIES, LUCKY_NULL, Outcome, family, run_improve, run_masked  # noqa: E402
from headprune.search.simulation.compress import run_compress  # noqa: E402

FLIPS = (0.001, 0.003, 0.01, 0.03, 0.05)
SIZES = {"2000/1000": (2000, 1000, (0.008, 0.002)), "150/300": (150, 300, (0.078, 0.003))}
SEARCHES = {"defaults": {}, "extend 0": {"extend": 0}, "extend 2": {"extend": 2},
            "main job": {"nominees": 3, "max_heads": 2, "finalists": 2}}
REALS = FAMILIES  # real heads, an interacting pair, 2 real heads among exact nulls, or two acting only together
EXCLUSIVE_MAX_FLIP = 0.03


def run_cell(size: str, reals: str, flip: float, search: str, rule: str, runs: int) -> list[Outcome]:
    """``runs`` simulated find runs of one cell, seeds 0..runs-1 (the same models for every rule)."""
    discovery, heldout, effect = SIZES[size]
    return [run_improve(seed, flip=flip, discovery=discovery, heldout=heldout, rule=rule,
                        settings=FindSettings(seed=seed, **SEARCHES[search]), **family(reals, effect, flip))
            for seed in range(runs)]


def figures(out: Sequence[Outcome], reals: str) -> dict:
    """The cell's rates (see the module docstring); ``all_kept`` is None without real heads. ``null_ahead``: runs whose
    proposal holds every real head with a null head ahead of one of them in its order; ``confirmed_null_ahead``:
    those runs with every real head kept and confirmed (both as shares of all runs)."""
    real = any(o.real for o in out)
    return {"passenger": float(np.mean([o.passenger for o in out])),
            "all_kept": float(np.mean([o.all_kept for o in out])) if real else None,
            "confirmed_all": float(np.mean([o.confirmed and o.all_kept for o in out])) if real else None,
            "confirmed": float(np.mean([o.confirmed for o in out])),
            "false_confirmed": float(np.mean([o.false_confirmation for o in out])),
            "confirmed_gain": float(100 * np.mean([o.confirmed_gain for o in out])),
            "null_ahead": float(np.mean([o.null_ahead for o in out])),
            "confirmed_null_ahead": float(np.mean([o.null_ahead and o.confirmed and o.all_kept for o in out]))}


def feasible(reals: str, flip: float) -> bool:
    """Exclusive toggles need the heads' shares to fit in the examples: 16 null heads flipping 5% do not."""
    return reals != "2 exclusive" or flip <= EXCLUSIVE_MAX_FLIP


def improve_table(runs: int, rules: Sequence[str]) -> list[dict]:
    rows = []
    for size in SIZES:
        for search in SEARCHES:
            for reals in REALS:
                for flip in (f for f in FLIPS if feasible(reals, f)):
                    row: dict = {"size": size, "search": search, "real": reals, "flip": flip}
                    for rule in rules:
                        row[rule] = figures(run_cell(size, reals, flip, search, rule, runs), reals)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    return rows


# The cells that decide, run again at more runs: (size, real heads, null heads' flip)
POWER_CELLS = [(size, reals, 0.003) for size in SIZES for reals in ("1", "2", "2 exclusive", "pair", "together",
                                                                   "null first")] + \
              [(size, "1", flip) for size in SIZES for flip in (0.03, 0.05)] + \
              [(size, "0", flip) for size in SIZES for flip in (0.01, 0.03, 0.05)] + \
              [(size, LUCKY_NULL, EXCLUSIVE_MAX_FLIP) for size in SIZES]  # size where a null head is ranked first


def power_table(runs: int, rules: Sequence[str]) -> list[dict]:
    """The cells of :data:`POWER_CELLS` at find's defaults, ``runs`` each, every rule on the same models."""
    rows = []
    for size, reals, flip in POWER_CELLS:
        row: dict = {"size": size, "search": "defaults", "real": reals, "flip": flip, "runs": runs}
        for rule in rules:
            row[rule] = figures(run_cell(size, reals, flip, "defaults", rule, runs), reals)
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def masked_table(runs: int, rule: str) -> list[dict]:
    """The held-out stage on a fixed proposal of redundant and masked heads (``run_masked``): S gains, its kept
    set does not; one rule (find's)."""
    rows = []
    for flip in FLIPS:
        out = [run_masked(seed, flip=flip, rule=rule) for seed in range(runs)]
        rows.append({"flip": flip, rule: figures(out, "masked")})
        print(json.dumps(rows[-1]), flush=True)
    return rows


def compress_table(runs: int) -> list[dict]:
    rows = []
    for max_drop in (0.5, 1.0, 2.0):
        row: dict = {"max_drop": max_drop}
        for rule in ("held-out", "estimate"):
            out = [run_compress(seed, max_drop=max_drop, rule=rule) for seed in range(runs)]
            accepted = [o for o in out if o.accepted]
            row[rule] = {"accepted": len(accepted) / runs, "accepted_over_budget":
                         (sum(o.over_budget for o in accepted) / len(accepted)) if accepted else None,
                         "chosen_over_budget": float(np.mean([o.over_budget for o in out])),
                         "heads_removed": float(np.mean([o.removed for o in out]))}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=400, help="runs per improve cell (find's rule)")
    parser.add_argument("--compress-runs", type=int, default=3000, help="runs per compress budget and rule")
    parser.add_argument("--power-runs", type=int, default=1000, help="runs per cell of the power table (0: none)")
    parser.add_argument("--rules", default=f"{FIND_RULE},sequence",
                        help="selection rules to run (find's first), comma-separated")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    rules = [rule for rule in args.rules.split(",") if rule]
    runnable = [name for name in RULES if RULES[name].runs]
    if not rules or set(rules) - set(runnable):
        parser.error(f"--rules: a comma-separated choice of {', '.join(runnable)}")
    logger = logging.getLogger("headprune")
    level = logger.level
    logger.setLevel(logging.WARNING)
    started = time.perf_counter()
    try:
        power = power_table(args.power_runs, rules) if args.power_runs else []  # first: the cells that decide
        figures_ = {"bench": "passengers", "runs": args.runs, "power_runs": args.power_runs,
                    "compress_runs": args.compress_runs,
                    "rules": rules[:1], "power_rules": rules, "power": power,
                    "improve": improve_table(args.runs, rules[:1]),
                    "masked": masked_table(args.runs, rules[0]), "compress": compress_table(args.compress_runs)}
    finally:
        logger.setLevel(level)
    figures_["seconds"] = round(time.perf_counter() - started, 1)
    worst = max(figures_["improve"], key=lambda row: row[rules[0]]["passenger"])
    print(f"worst cell ({rules[0]}): passengers in {worst[rules[0]]['passenger']:.1%} of runs ({worst['size']}, "
          f"{worst['search']}, real {worst['real']}, null flip {worst['flip']:.1%}); {figures_['seconds']:.0f} s",
          flush=True)
    if args.json:
        from pathlib import Path

        from headprune.core.io import atomic_write_json

        atomic_write_json(Path(args.json), figures_)
    return figures_


if __name__ == "__main__":
    main()
