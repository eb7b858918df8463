"""find with a guard, on counts-only models through its own search code: size and power (numpy, seconds a cell).

For each cell (discovery/held-out 2,000/1,000 with real task heads of +0.6 points, and 150/300 with heads of +7.5
points, the sizes of ``scripts/passengers.py``; one accuracy guard of 600 examples, 200 read by the search, with a
margin of 5 points; null heads flipping 0.3% of both tasks' answers; 18 heads; find's defaults), and each family of
``headprune.search.simulation.guards`` (``conflict``, ``boundary``, ``harmless``), the share of runs that

- **claim a broken guard**: ship a set whose true guard change is at or beyond the margin and call it confirmed
  (what the guard's test bounds: at most alpha/2 = 2.5%);
- **ship a good set**: confirmed, with a true task gain, the guard truly kept (power);
- and the expected true task gain confirmed (points: the shipped set's true gain where confirmed, 0 where not);

with the guard, and without it (find as before, on the same models) for comparison.

    python scripts/guard_rates.py [--runs 400] [--json docs/bench/guards.json]

docs/find.md's table is this record rendered by ``python -m scripts.bench.render``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time

import numpy as np

from headprune.search.simulation.guards import FAMILIES, GuardOutcome, run_guarded

SIZES = {"2000/1000": (2000, 1000, (0.008, 0.002)), "150/300": (150, 300, (0.078, 0.003))}
MARGIN = 0.05  # 5 points
FLIP = 0.003


def rates(out: list[GuardOutcome]) -> dict:
    return {"false_guard_claim": float(np.mean([o.false_guard_claim for o in out])),
            "good_ship": float(np.mean([o.good_ship for o in out])),
            "confirmed": float(np.mean([o.confirmed for o in out])),
            "confirmed_gain": float(np.mean([100 * o.task_gain if o.confirmed else 0.0 for o in out]))}


def run_cell(size: str, family: str, runs: int, guarded: bool) -> list[GuardOutcome]:
    """``runs`` simulated find runs of one cell, seeds 0..runs-1 (the same models with and without the guard)."""
    discovery, heldout, effect = SIZES[size]
    return [run_guarded(seed, family=family, effect=effect, margin=MARGIN, flip=FLIP, discovery=discovery,
                        heldout=heldout, guarded=guarded) for seed in range(runs)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--json", default=None, help="write the record here")
    args = parser.parse_args(argv)
    logging.getLogger("headprune").setLevel(logging.WARNING)
    started, results = time.perf_counter(), []
    for size in SIZES:
        for family in FAMILIES:
            row = {"size": size, "family": family, "margin": 100 * MARGIN,
                   "guarded": rates(run_cell(size, family, args.runs, True)),
                   "unguarded": rates(run_cell(size, family, args.runs, False))}
            results.append(row)
            print(json.dumps(row), flush=True)
    record = {"bench": "guards", "runs": args.runs, "flip": FLIP, "results": results,
              "seconds": round(time.perf_counter() - started, 1)}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=1)
            handle.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
