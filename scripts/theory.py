"""The theory experiment end to end: train, analyse, `find` on task B with task A as control, export, report.

    python scripts/theory.py [--seeds 0,1,2,3,4] [--out runs/theory] [--steps 6000]

Writes, under --out: seed-N/ (model/, task_a.jsonl, task_b.jsonl, history.json, find/, pruned/, record.json),
losses.png, heads.png, records.json and report.md, which compares the heads the analysis named with the
heads find returned. Exits 0 when every seed's find set contains the named heads and is confirmed, else 1.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from headprune.core.io import atomic_write_json, atomic_write_text
from headprune.synthetic.experiment import run_seed
from headprune.synthetic.report import plot_training, render_report
from headprune.synthetic.train import Settings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2,3,4", help="comma-separated training seeds")
    parser.add_argument("--out", type=Path, default=Path("runs/theory"))
    parser.add_argument("--steps", type=int, default=Settings.steps, help="gradient-descent steps")
    args = parser.parse_args()
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds must be comma-separated integers, got {args.seeds!r}")
    records, folders = [], []
    for seed in seeds:
        folder = args.out / f"seed-{seed}"
        print(f"seed {seed}: training, analysis, find, export -> {folder}", file=sys.stderr, flush=True)
        record = run_seed(Settings(seed=seed, steps=args.steps), folder)
        atomic_write_json(folder / "record.json", record)
        b = record["heldout_b"]
        print(f"  named {record['conflict_heads']}, found {record['found_heads']}, B held-out "
              f"{b['accuracy_before']:.1%} -> {b['accuracy_after']:.1%} (p={b['p_value']:.2g}), A control "
              f"{record['control_a']['difference']:+.1%}", file=sys.stderr, flush=True)
        records.append(record)
        folders.append(folder)
    figures = plot_training(folders, records, args.out)
    atomic_write_json(args.out / "records.json", records)
    atomic_write_text(args.out / "report.md", render_report(records, figures))
    print(f"report: {args.out / 'report.md'}  figures: {figures[0]}, {figures[1]}")
    return 0 if all(r["found_contains_named"] and r["heldout_b"]["confirmed"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
