"""Measure the determinism check's spread in a half precision: the intact model against itself in another batch
order, and the same with a real batch-mixing bug (each row sees the batch mean of the embeddings, the test hook
of tests/test_trust.py), on the discovery split of each task. Writes one JSON per task to stdout / --out.

    flock /tmp/headprune-heavy.lock python scripts/bench_determinism.py --dtype bfloat16 \
        --task sentiment:2000 --task arithmetic:2000 --mix 0.5 --mix 0.01 --out runs/determinism-bf16.json
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from headprune.devices import dtype_name
from headprune.evaluation import Evaluator
from headprune.evaluation.contract import disagreement
from headprune.models import load_model
from headprune.search.determinism import reordered_pass
from headprune.search.split import split_task
from headprune.tasks import load_task


def spread(first, second) -> dict:  # noqa: ANN001 - EvalResults
    """Relative margin differences, decision gaps and flipped answers of two passes."""
    a, b = first.margins, second.margins
    relative = np.abs(a - b) / np.maximum(1.0, np.abs(a))
    flips = first.correct != second.correct
    decides = first.decisions
    return {"n": int(a.size), "relative": {"median": float(np.median(relative)), "rms": float(np.sqrt((relative ** 2).mean())),
                                           "p99": float(np.quantile(relative, 0.99)), "max": float(relative.max())},
            "flipped": int(flips.sum()), "flipped_decisions": [float(d) for d in decides[flips]],
            "smallest_decisions": sorted(float(abs(d)) for d in decides)[:5]}


def measure(lm, spec: str, n: int, mixes: list[float]) -> dict:  # noqa: ANN001
    task = load_task(spec)
    discovery = split_task(task, discovery=n, heldout=min(50, len(task) - n), seed=0).discovery
    evaluator = Evaluator(lm, discovery, batch_size="auto", reuse_layers=True)
    out: dict = {"task": spec, "n": n, "batch": evaluator.batch_size}
    for mix in mixes:
        handle = None
        if mix:
            handle = lm.model.get_input_embeddings().register_forward_hook(
                lambda module, args, output, mix=mix: output + mix * output.mean(dim=0, keepdim=True))
        started = time.perf_counter()
        try:
            checker = Evaluator(lm, discovery, batch_size="auto", reuse_layers=False) if mix else evaluator
            first, second = checker.run(), reordered_pass(checker)
        finally:
            if handle is not None:
                handle.remove()
        problem, ties = disagreement(first, second, dtype_name(lm.dtype))
        out[f"mix={mix}"] = {**spread(first, second), "check": problem or "agrees", "ties": ties,
                             "seconds": round(time.perf_counter() - started, 1)}
        print(json.dumps({spec: out[f"mix={mix}"]}), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--task", action="append", required=True, help="SPEC:N (discovery size)")
    parser.add_argument("--mix", action="append", type=float, default=[])
    parser.add_argument("--out")
    parser.add_argument("--bug-n", type=int, default=60, help="discovery size of the runs with a bug")
    args = parser.parse_args()
    lm = load_model(args.model, dtype=args.dtype, device="cpu")
    results = []
    # Every task intact first, then with each bug: what is measured by a deadline is the most useful part.
    for mixes in ([0.0], args.mix):
        for entry in args.task if mixes else ():
            spec, _, n = entry.rpartition(":")
            size = int(n) if not mixes[0] else min(int(n), args.bug_n)  # a bug shows at any size: keep it short
            results.append(measure(lm, spec, size, mixes))
            if args.out:
                with open(args.out, "w") as handle:
                    json.dump(results, handle, indent=1)


if __name__ == "__main__":
    main()
