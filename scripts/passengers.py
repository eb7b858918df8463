"""find's selection error rates on counts-only models, through its own search code (seconds per thousand runs).

Two tables, each comparing find's rule with the rule before 0.2 through the same code
(``headprune.search.simulation``):

- **improve**: the share of runs whose primary set holds a passenger (a null head in a set of several heads),
  the share of real heads kept in the primary set, and the share of runs confirmed on held-out with only real
  heads; for null heads flipping 0.1%-5% of answers, 0, 1 and 2 real heads of +0.6 points (0.8% rescued, 0.2%
  damaged), find's defaults and ``--extend 2``; 18 heads (2 layers of 9), discovery 2,000, held-out 1,000.
  ``halves``: find's rule (propose on one half of discovery, admit on the other, single heads by the lower end
  of their gain's 70% score interval); ``same``: propose and admit on all of discovery, single heads by the
  raw gain (the rule before 0.2, as headprune 0.1.0 ran it up to the walk's order of elimination).
- **compress**: the share of runs accepted on held-out and the share of accepted sets whose true drop exceeds
  the budget, at budgets 0.5, 1 and 2 points (36 heads, 40% harmless); ``held-out``: find's budget (discovery
  judged as the held-out test will judge it), ``estimate``: the discovery estimate alone.

    python scripts/passengers.py [--runs 400] [--compress-runs 3000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Sequence

import numpy as np

from headprune.search.find_result import FindSettings
from headprune.search.simulation import run_compress, run_improve

FLIPS = (0.001, 0.003, 0.01, 0.03, 0.05)
REAL = (0.008, 0.002)


def improve_table(runs: int) -> list[dict]:
    rows = []
    for extend in (0, 2):
        for reals in (0, 1, 2):
            for flip in FLIPS:
                row: dict = {"extend": extend, "real": reals, "flip": flip}
                for rule in ("halves", "same"):
                    out = [run_improve(seed, flip=flip, real=[REAL] * reals, rule=rule,
                                       settings=FindSettings(seed=seed, extend=extend)) for seed in range(runs)]
                    row[rule] = {"passenger": float(np.mean([o.passenger for o in out])),
                                 "kept": float(np.nanmean([o.kept for o in out])) if reals else None,
                                 "clean_confirmed": float(np.mean([o.clean_confirmation for o in out])),
                                 "false_confirmed": float(np.mean([o.false_confirmation for o in out]))}
                rows.append(row)
                print(json.dumps(row), flush=True)
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
    parser.add_argument("--runs", type=int, default=400, help="runs per improve cell and rule")
    parser.add_argument("--compress-runs", type=int, default=3000, help="runs per compress budget and rule")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    logger = logging.getLogger("headprune")
    level = logger.level
    logger.setLevel(logging.WARNING)
    started = time.perf_counter()
    try:
        figures = {"runs": args.runs, "compress_runs": args.compress_runs, "improve": improve_table(args.runs),
                   "compress": compress_table(args.compress_runs)}
    finally:
        logger.setLevel(level)
    figures["seconds"] = round(time.perf_counter() - started, 1)
    worst = max(figures["improve"], key=lambda row: row["halves"]["passenger"])
    print(f"worst cell: passengers in {worst['halves']['passenger']:.1%} of runs (extend {worst['extend']}, "
          f"{worst['real']} real heads, null flip {worst['flip']:.1%}); {figures['seconds']:.0f} s", flush=True)
    if args.json:
        from pathlib import Path

        from headprune.core.io import atomic_write_json

        atomic_write_json(Path(args.json), figures)
    return figures


if __name__ == "__main__":
    main()
