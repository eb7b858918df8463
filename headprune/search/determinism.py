"""Determinism is measured, not assumed: the intact model's discovery results, computed a second time in
another batch order, must agree with the first before anything is screened against them.

The contract (also what the journal's resume relies on): the same answer on every example, except where the
first pass's margin lies within the tolerance of zero (a tie at this precision, counted in the log), and every
margin within ``MARGIN_TOLERANCE[dtype] * max(1, |margin|)``. The second pass is cheap: the discovery set once
more, examples in reverse order and half the batch size (so batches are composed and padded differently),
without the layer cache. It is journalled, so ``--resume`` does not pay for it again.
"""

from __future__ import annotations

import logging
import platform

import numpy as np
import torch

from headprune.devices import dtype_name
from headprune.errors import InternalCheckError
from headprune.evaluation import EvalResult, Evaluator
from headprune.models import LoadedModel

log = logging.getLogger("headprune")

# Relative margin tolerance per dtype: float32 rounding across batch shapes is ~1e-6 relative; half precisions
# keep 8 (bfloat16) or 11 (float16) mantissa bits, and their errors grow through the layers.
MARGIN_TOLERANCE = {"float32": 1e-4, "float64": 1e-8, "float16": 1e-2, "bfloat16": 5e-2}
KEY = "determinism|discovery,reversed,half-batch"


def run_environment(lm: LoadedModel) -> dict[str, object]:
    """What a journal records about the software and hardware a run computes with (``--resume`` insists on
    the same): package versions, dtype, device and thread count."""
    import transformers

    from headprune import __version__

    return {"headprune": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "dtype": dtype_name(lm.dtype), "device": str(lm.device),
            "threads": torch.get_num_threads()}


def reordered_pass(evaluator: Evaluator) -> EvalResult:
    """The intact model on the evaluator's task again: reversed example order, half the batch size (2 for 1),
    no layer cache; returned in the task's own order."""
    task, lm = evaluator.task, evaluator.lm
    reversed_task = task.subset(list(range(len(task) - 1, -1, -1)))
    batch = max(1, (evaluator.batch_size + 1) // 2) if evaluator.batch_size > 1 else 2
    again = Evaluator(lm, reversed_task, batch_size=batch).run(())
    return EvalResult(again.task, again.kind, tuple(reversed(again.results)))


def compare_passes(first: EvalResult, second: EvalResult, dtype: str) -> int:
    """Check two intact passes over the same examples against the contract; return the number of ties.

    Raises:
        InternalCheckError: an answer or a margin differs beyond the tolerance (the message names the example).
    """
    tolerance = MARGIN_TOLERANCE.get(dtype, 5e-2)
    a, b = first.margins, second.margins
    allowed = tolerance * np.maximum(1.0, np.abs(a))
    ties = np.abs(a) <= allowed
    advice = ("results depend on how examples are batched, so no gain measured on them could be trusted; "
              "try --dtype float32 or --batch-size 1")
    if first.has_accuracy:
        flipped = np.flatnonzero((first.correct != second.correct) & ~ties)
        if flipped.size:
            i = int(flipped[0])
            raise InternalCheckError(
                f"determinism check: the intact model answers {flipped.size} discovery example(s) differently in "
                f"another batch order (first: {first.results[i].id}, margin {a[i]:.4g} then {b[i]:.4g}); {advice}")
    excess = np.abs(a - b) - allowed
    if (excess > 0).any():
        i = int(np.argmax(excess))
        raise InternalCheckError(
            f"determinism check: intact margins differ by up to {abs(a[i] - b[i]):.3g} between batch orders "
            f"(example {first.results[i].id}: {a[i]:.6g} then {b[i]:.6g}; allowed {allowed[i]:.3g} in {dtype}); "
            f"{advice}")
    return int(ties.sum()) if first.has_accuracy else 0


def check_determinism(conditions, baseline: EvalResult) -> None:  # noqa: ANN001 - search.conditions.Conditions
    """Before screening: the intact discovery results again in another batch order must agree with
    ``baseline`` (see the module docstring); the second pass is journalled.

    Raises:
        InternalCheckError
    """
    evaluator = conditions.evaluators["discovery"]
    again = conditions.journal.get(KEY, evaluator.task)
    if again is None:
        again = reordered_pass(evaluator)
        conditions.journal.put(KEY, again)
    dtype = dtype_name(evaluator.lm.dtype)
    ties = compare_passes(baseline, again, dtype)
    log.info("determinism check: the intact model agrees with itself in another batch order on %d discovery "
             "examples (margins within %g relative, %s%s)", baseline.n, MARGIN_TOLERANCE.get(dtype, 5e-2), dtype,
             f"; {ties} ties at this precision" if ties else "")
