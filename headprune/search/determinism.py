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

In a half precision the check is calibrated on the machine it runs on, since how far rounding alone spreads the
margins between batch orders depends on the kernels (a CPU without native bfloat16 products spreads them more)
as much as on the dtype. On the first :data:`CALIBRATION_EXAMPLES` discovery examples the model is widened to
float32 (its own weights: every half-precision value is a float32 value) and evaluated in the baseline's batches
and in the other batch order. In float32 the two orders must agree to float32's tolerance: a batch dependence of
the model or of headprune's passes shows there at full strength, far above rounding. Against the float32 pass in
the same batches, the run's dtype shows its own rounding error on this machine; the half-precision passes may
spread by twice that (each carries such an error), no more: more is a batch dependence of the half-precision path
itself. Cost: 2 float32 passes over those examples, plus one in the run's dtype where discovery has more of them
(the baseline is reused otherwise); all journalled. Where the model cannot be widened (weights offloaded by a
device map, or no memory for a float32 copy) the check says so and keeps its per-example bounds only.
"""

from __future__ import annotations

import logging
import platform
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from headprune.core import cpu_linear
from headprune.core.devices import dtype_name, widened
from headprune.core.distributed import Team
from headprune.errors import InternalCheckError
from headprune.evaluation import EvalResult, Evaluator
from headprune.evaluation.contract import ABSOLUTE_TOLERANCE, disagreement, rounding_spread, spread, tolerance
from headprune.loading.models import LoadedModel
from headprune.search.journal import Journal

log = logging.getLogger("headprune")

KEY = "determinism|discovery,reversed,half-batch"
# The calibration's examples: a small part of discovery, and a rounding error measured on them is within about 16%
# of the whole set's (SmolLM2-135M bfloat16 sentiment, 300 examples: 64-example samples 0.071-0.098 around 0.085,
# 1st to 99th percentile), which the bound's factor of two covers.
CALIBRATION_EXAMPLES = 64
HALF_PRECISIONS = (torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class Calibration:
    """What rounding does on this machine, measured on the first ``examples`` discovery examples.

    Attributes:
        examples: how many.
        rounding: the spread of the run's dtype against float32 in the same batches (its own rounding error).
        bound: the spread the half-precision passes are allowed (``contract.rounding_spread``).
        float32_spread: the spread of the two float32 passes (batch orders): float32 rounding, or a bug.
    """

    examples: int
    rounding: float
    bound: float
    float32_spread: float


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
    """The intact model on the evaluator's task again: reversed example order, batches of at most half the largest
    batch the evaluator runs (2 where it runs one example at a time), no layer cache; returned in the task's own
    order. Half the largest batch run, not half the batch size: batches are cut by length, often well below the
    batch size, and halving that alone can leave every batch as it was."""
    task, lm = evaluator.task, evaluator.lm
    reversed_task = task.subset(list(range(len(task) - 1, -1, -1)))
    largest = evaluator.largest_batch
    batch = (largest + 1) // 2 if largest > 1 else 2
    again = Evaluator(lm, reversed_task, batch_size=batch).run(())
    return EvalResult(again.task, again.kind, tuple(reversed(again.results)))


def compare_passes(first: EvalResult, second: EvalResult, dtype: str, calibration: Calibration | None = None
                   ) -> int:
    """Check two intact passes over the same examples against the contract (``evaluation.contract``), the
    spread within ``calibration``'s bound where there is one; return the number of ties.

    Raises:
        InternalCheckError: an answer or a margin differs beyond the tolerance (the message names the example).
    """
    problem, ties = disagreement(first, second, dtype, spread_bound=calibration.bound if calibration else None)
    if problem is not None:
        why = "" if calibration is None or "spread" not in problem else (
            f", twice {dtype}'s own rounding error against float32 on this machine ({calibration.rounding:.3g} on "
            f"{calibration.examples} examples), while in float32 the batch order does not matter: the {dtype} "
            "computation itself depends on the batches")
        raise InternalCheckError(f"determinism check: in another batch order the intact model's {problem}{why}; "
                                 "results depend on how examples are batched, so no gain measured on them could be "
                                 "trusted; try --dtype float32 or --batch-size 1")
    return ties


def calibrate(evaluator: Evaluator, baseline: EvalResult, journal: Journal) -> Calibration | None:
    """The float32 check and the half-precision spread bound on the first :data:`CALIBRATION_EXAMPLES` examples
    of ``evaluator``'s task (see the module docstring); ``None`` in float32 (nothing to calibrate) or where the
    model cannot be widened. Every pass is journalled.

    Raises:
        InternalCheckError: in float32 the two batch orders disagree.
    """
    lm, task = evaluator.lm, evaluator.task
    if lm.dtype not in HALF_PRECISIONS:
        return None
    subset = task.first(CALIBRATION_EXAMPLES)
    n, (where, *keys) = len(subset), calibration_keys(len(subset))
    wide = [journal.get(key, subset) for key in keys]
    if None in wide:
        with widened(lm.model) as done:
            if not done:
                log.warning("determinism check: the model cannot be widened to float32 here (weights offloaded by a "
                            "device map, or no memory for a float32 copy): each margin is checked, their spread is "
                            "not")
                return None
            widest = Evaluator(lm, subset, batch_size=evaluator.plan)
            wide = [_journalled(journal, keys[0], subset, lambda: widest.run(())),
                    _journalled(journal, keys[1], subset, lambda: reordered_pass(widest))]
    problem, _ = disagreement(wide[0], wide[1], "float32")
    if problem is not None:
        raise InternalCheckError(f"determinism check: with the model widened to float32 (its {dtype_name(lm.dtype)} "
                                 f"weights, first {n} discovery examples), in another batch order the intact model's "
                                 f"{problem}; results depend on how examples are batched, so no gain measured on "
                                 "them could be trusted; try --batch-size 1")
    narrow = baseline if subset is task else _journalled(
        journal, where, subset, lambda: Evaluator(lm, subset, batch_size=evaluator.plan).run(()))
    return Calibration(n, spread(wide[0], narrow), rounding_spread(wide[0], narrow), spread(wide[0], wide[1]))


def calibration_keys(examples: int) -> tuple[str, str, str]:
    """The journal keys of the calibration's passes over the first ``examples``: in the run's dtype (where they
    are not all of discovery), in float32, and in float32 in the other batch order."""
    where = f"determinism|first {examples}"
    return where, f"{where},float32", f"{where},float32,reversed,half-batch"


def _journalled(journal: Journal, key: str, task, compute: Callable[[], EvalResult]) -> EvalResult:  # noqa: ANN001
    """``key``'s result from the journal, or computed now and journalled."""
    result = journal.get(key, task)
    if result is None:
        result = compute()
        journal.put(key, result)
    return result


def check_determinism(conditions, baseline: EvalResult) -> None:  # noqa: ANN001 - search.conditions.Conditions
    """Before screening: the intact discovery results again in another batch order must agree with
    ``baseline`` (see the module docstring); every pass is journalled.

    Raises:
        InternalCheckError
    """
    evaluator = conditions.evaluators["discovery"]
    log.info("determinism check: %s", check(evaluator, baseline, conditions.journal))


def check(evaluator: Evaluator, baseline: EvalResult, journal: Journal) -> str:
    """The determinism check of ``evaluator``'s intact ``baseline`` (see the module docstring); what it found,
    in words.

    Raises:
        InternalCheckError
    """
    calibration = calibrate(evaluator, baseline, journal)  # first: its float32 check stops a batch-dependent model soon
    again = _journalled(journal, KEY, evaluator.task, lambda: reordered_pass(evaluator))
    dtype = dtype_name(evaluator.lm.dtype)
    ties = compare_passes(baseline, again, dtype, calibration)
    found = (f"the intact model agrees with itself in another batch order on {baseline.n} discovery examples "
             f"({dtype}: margins within {tolerance(dtype):g} relative + {ABSOLUTE_TOLERANCE.get(dtype, 0.0):g}, "
             f"spread {spread(baseline, again):.3g}")
    if calibration is not None:
        found += (f" of {calibration.bound:.3g} allowed: twice {dtype}'s rounding error against float32 here, "
                  f"{calibration.rounding:.3g} on {calibration.examples} examples, {kernels(evaluator.lm)}; in "
                  f"float32 those examples spread by {calibration.float32_spread:.2g}")
    return found + (f"; {ties} ties at this precision)" if ties else ")")


def kernels(lm: LoadedModel) -> str:
    """Which kernels compute: the CPU's instruction set torch uses (``AVX512``, ``AVX2``; ``ATEN_CPU_CAPABILITY``
    chooses a lower one), or the device."""
    device = lm.device
    if device.type == "cpu":
        return f"CPU kernels {torch.backends.cpu.get_cpu_capability()}"
    return torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)
