"""Measure the determinism check in a half precision: the intact model against itself in another batch order, the
spread its own rounding allows on this machine's kernels (``headprune.search.determinism``), the float32 check, and
the same with a real batch-mixing bug (each row sees the batch mean of the embeddings, the hook of
tests/helpers/determinism_probe.py), on the discovery split of each task; what each pass cost. One JSON line per task and mix on
stdout, all of them in ``--json`` (default runs/bench/determinism.json). Run it again under ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` for an AVX2
CPU's kernels on any x86.

    flock /tmp/headprune-heavy.lock python -m scripts.bench.determinism --dtype bfloat16 \
        --task sentiment:2000 --task arithmetic:700 --mix 0.5 --json runs/determinism-bf16.json
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import torch

from headprune.core.devices import widened
from headprune.errors import InternalCheckError
from headprune.evaluation import Evaluator
from headprune.evaluation.contract import rounding_spread, spread
from headprune.loading.models import load_model
from headprune.search.determinism import CALIBRATION_EXAMPLES, KEY, calibration_keys, check, reordered_pass
from headprune.search.journal import Journal
from headprune.search.split import split_task
from headprune.tasks import load_task

from .common import add_json_option, write_json
from .common import timed as timed_call


def moves(first, second) -> dict:  # noqa: ANN001 - EvalResults
    """The spread of two passes' margins, their largest move and the answers that flipped."""
    a, b = first.margins, second.margins
    return {"spread": round(spread(first, second), 4), "largest": round(float(np.abs(a - b).max()), 4),
            "flipped": int((first.correct != second.correct).sum())}


def measure(lm, spec: str, n: int, mix: float) -> dict:  # noqa: ANN001
    """Every pass of the check, timed, then the check's own verdict on them (from a journal: nothing twice)."""
    task = load_task(spec)
    discovery = split_task(task, discovery=n, heldout=min(50, len(task) - n), seed=0).discovery
    handle = None if not mix else lm.model.get_input_embeddings().register_forward_hook(
        lambda module, args, output: output + mix * output.mean(dim=0, keepdim=True))
    journal, seconds = Journal(None, {}), {}

    def timed(name: str, compute):  # noqa: ANN001, ANN202
        result, seconds[name] = timed_call(compute)
        seconds[name] = round(seconds[name], 1)
        return result

    try:
        evaluator = Evaluator(lm, discovery, batch_size="auto", reuse_layers=True)
        baseline = timed("baseline", evaluator.run)
        journal.put(KEY, again := timed("other batch order", lambda: reordered_pass(evaluator)))
        subset = discovery.first(CALIBRATION_EXAMPLES)
        where, *keys = calibration_keys(len(subset))
        narrow = baseline if subset is discovery else timed(
            "calibration in the dtype", lambda: Evaluator(lm, subset, batch_size=evaluator.plan).run())
        journal.put(where, narrow)
        with widened(lm.model):
            widest = Evaluator(lm, subset, batch_size=evaluator.plan)
            wide = [timed("calibration in float32", widest.run),
                    timed("calibration in float32, other order", lambda: reordered_pass(widest))]
        for key, result in zip(keys, wide):
            journal.put(key, result)
        try:
            verdict = "agrees: " + check(evaluator, baseline, journal)
        except InternalCheckError as error:
            verdict = str(error)
    finally:
        if handle is not None:
            handle.remove()
    return {"task": spec, "n": n, "mix": mix, "batch": evaluator.batch_size,
            "kernels": torch.backends.cpu.get_cpu_capability(), "other batch order": moves(baseline, again), "rounding": round(spread(wide[0], narrow), 4),
            "allowed": round(rounding_spread(wide[0], narrow), 4), "calibration examples": len(subset),
            "float32": moves(wide[0], wide[1]), "verdict": verdict, "seconds": seconds}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--task", action="append", required=True, help="SPEC:N (discovery size)")
    parser.add_argument("--mix", action="append", type=float, default=[])
    parser.add_argument("--bug-n", type=int, default=60, help="discovery size of the runs with a bug")
    add_json_option(parser, "determinism")
    args = parser.parse_args(argv)
    lm = load_model(args.model, dtype=args.dtype, device="cpu")
    results = []
    # Every task intact first, then with each bug: what is measured by a deadline is the most useful part.
    for mix in [0.0, *args.mix]:
        for entry in args.task:
            spec, _, n = entry.rpartition(":")
            size = int(n) if not mix else min(int(n), args.bug_n)  # a bug shows at any size: keep it short
            results.append(measure(lm, spec, size, mix))
            print(json.dumps(results[-1]), flush=True)
            write_json(args.json, "determinism", args, results)  # after each task: a deadline keeps what is done


if __name__ == "__main__":
    main()
