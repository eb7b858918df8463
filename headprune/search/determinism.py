"""Determinism is measured, not assumed: the intact model's discovery results, computed a second time in
another batch order, must agree with the first before anything is screened against them.

The contract is ``headprune.evaluation.contract``'s (also what the journal's resume relies on): the same answer
on every example, except ties at this precision (counted in the log), every margin within its allowance, and
in a half precision a bounded spread of the margin differences. What makes an example a tie depends on what
decides its answer (the scorer): for choice, classify and the other one-pass kinds the margin itself (the
answer flips exactly when the margin changes sign); for generating kinds the decoding gap of greedy decoding,
the smallest top-1 minus top-2 score difference over the steps that wrote the answer text
(``headprune.evaluation.decoding``). The teacher-forced margin of a generate task's target does not decide what
greedy writes (a stop token, a space, a period after the number can be a hair from the runner-up while the
target's own tokens are far from it): exempting by it would excuse real flips and refuse harmless ones. The
second pass is cheap: the discovery set once
more, examples in reverse order and half the batch size (so batches are composed and padded differently),
without the layer cache. It is journalled, so ``--resume`` does not pay for it again.
"""

from __future__ import annotations

import logging
import platform
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from headprune import cpu_linear
from headprune.devices import dtype_name
from headprune.distributed import Team
from headprune.errors import InternalCheckError
from headprune.evaluation import EvalResult, Evaluator
from headprune.evaluation.contract import ABSOLUTE_TOLERANCE, disagreement, spread, tolerance
from headprune.models import LoadedModel

log = logging.getLogger("headprune")

KEY = "determinism|discovery,reversed,half-batch"


def run_environment(lm: LoadedModel) -> dict[str, object]:
    """What a journal records about the software and hardware a run computes with (``--resume`` insists on
    the same): package versions, dtype, device, thread count and the CPU's float32 linear kernel."""
    import transformers

    from headprune._version import __version__

    return {"headprune": __version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "dtype": dtype_name(lm.dtype), "device": str(lm.device),
            "threads": torch.get_num_threads(), "cpu_linear": cpu_linear.kernel()}


@contextmanager
def one_kernel(team: Team) -> Iterator[None]:
    """Every process of a data-parallel run computes with rank 0's CPU float32 linear kernel while entered (the
    same on alike machines; on a mixed cluster too, as the journal, written by rank 0, records)."""
    if not team.parallel:
        yield
        return
    with cpu_linear.agreed(team.broadcast(cpu_linear.kernel()), "the run's first process"):
        yield


def reordered_pass(evaluator: Evaluator) -> EvalResult:
    """The intact model on the evaluator's task again: reversed example order, half the batch size (2 for 1),
    no layer cache; returned in the task's own order."""
    task, lm = evaluator.task, evaluator.lm
    reversed_task = task.subset(list(range(len(task) - 1, -1, -1)))
    batch = max(1, (evaluator.batch_size + 1) // 2) if evaluator.batch_size > 1 else 2
    again = Evaluator(lm, reversed_task, batch_size=batch).run(())
    return EvalResult(again.task, again.kind, tuple(reversed(again.results)))


def compare_passes(first: EvalResult, second: EvalResult, dtype: str) -> int:
    """Check two intact passes over the same examples against the contract (``evaluation.contract``); return
    the number of ties.

    Raises:
        InternalCheckError: an answer or a margin differs beyond the tolerance (the message names the example).
    """
    problem, ties = disagreement(first, second, dtype)
    if problem is not None:
        raise InternalCheckError(f"determinism check: in another batch order the intact model's {problem}; results "
                                 "depend on how examples are batched, so no gain measured on them could be "
                                 "trusted; try --dtype float32 or --batch-size 1")
    return ties


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
             "examples (margins within %g relative + %g, spread %.3g, %s%s)", baseline.n, tolerance(dtype),
             ABSOLUTE_TOLERANCE.get(dtype, 0.0), spread(baseline, again), dtype,
             f"; {ties} ties at this precision" if ties else "")
