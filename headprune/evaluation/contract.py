"""What "the same results" means in headprune, stated once.

Two evaluations of the same examples agree when

1. every example gets the same answer (and, for generating kinds, the same generated text), except ties: an
   example whose answer the reference decided by less than
   the allowance (for most kinds the margin; for generated answers the smallest top-1 minus top-2 gap of greedy
   decoding over the steps that wrote the answer, ``headprune.evaluation.decoding``: the teacher-forced margin
   does not decide what greedy writes);
2. every margin is within the allowance of the reference's: ``MARGIN_TOLERANCE[dtype] * max(1, |margin|)``
   plus ``ABSOLUTE_TOLERANCE[dtype]``;
3. where a bound is given (half precisions), the spread of the margin differences (their root mean square,
   relative to ``max(1, |margin|)``) is at most that bound.

Why three parts, and why the half precisions get an absolute floor and a spread bound: a bfloat16 logit keeps 8
significant bits, so a logit near 20 is rounded to a multiple of 0.125 and two batch orders can put one margin a
quantum or two apart at any margin size; the error is absolute, in units of the logits' rounding, not relative
to the margin. A per-example bound checked as a maximum over n examples must cover the tail of that
distribution, which grows with n; set tight enough to notice a bug, it cries wolf at scale. So the per-example
bound is a generous cap (four quanta of a logit near 20: gross errors), and what notices a systematic bug, such
as rows of a batch mixing, is the spread: its root mean square does not grow with n. How far rounding spreads the
margins is not a property of the dtype alone: a CPU without native bfloat16 products (AVX2) spreads them more
than one with them (AVX-512 BF16), so the spread bound is not a constant here but measured where the comparison
is made, on the machine's own kernels (``rounding_spread``; ``headprune.search.determinism``). float16 keeps 3
more bits: 8 times smaller floors.

This is the contract of the fast paths (a shared prompt prefix computed once, layer inputs replayed from the
intact run) against a plain full forward pass, and of the intact model against itself in another batch order
(``headprune.search.determinism``).
"""

from __future__ import annotations

import numpy as np

from headprune.evaluation.results import EvalResult

# Relative margin tolerance per dtype: float32 rounding across batch shapes and cached keys/values is ~1e-6
# relative; half precisions keep 8 (bfloat16) or 11 (float16) mantissa bits, and their errors grow with depth.
MARGIN_TOLERANCE = {"float64": 1e-8, "float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}
# Absolute floor per example (log-prob units): four rounding quanta of a bfloat16 logit near 20 (0.125; float16:
# 3 more bits, 1/8). On SmolLM2-135M in bfloat16 the intact model in another batch order moved a margin by at most
# one quantum (scripts/bench/determinism.py; figures in docs/find.md).
ABSOLUTE_TOLERANCE = {"float64": 0.0, "float32": 0.0, "float16": 0.0625, "bfloat16": 0.5}


def tolerance(dtype: str) -> float:
    return MARGIN_TOLERANCE.get(dtype, MARGIN_TOLERANCE["bfloat16"])


def allowance(dtype: str, reference: np.ndarray) -> np.ndarray:
    """Per example, how far a value may move from ``reference`` (margins, or decoding gaps for ties)."""
    floor = ABSOLUTE_TOLERANCE.get(dtype, ABSOLUTE_TOLERANCE["bfloat16"])
    return tolerance(dtype) * np.maximum(1.0, np.abs(reference)) + floor


def rounding_spread(reference: EvalResult, other: EvalResult) -> float:
    """A spread bound for two passes in a dtype that is not float32, from ``reference`` (float32) and ``other``
    (that dtype, the same examples in the same batches, so that whatever the batches do to the results is in
    both): twice the dtype's own rounding error, the spread between them. Two passes in that dtype each carry such
    an error, so by the triangle inequality their difference spreads by at most twice it; never below float32's
    own tolerance."""
    return max(2.0 * spread(reference, other), MARGIN_TOLERANCE["float32"])


def spread(reference: EvalResult, other: EvalResult) -> float:
    """Root mean square of the margin differences relative to ``max(1, |reference margin|)``."""
    a, b = reference.margins, other.margins
    return float(np.sqrt(np.mean(((a - b) / np.maximum(1.0, np.abs(a))) ** 2))) if a.size else 0.0


def _rewritten(reference: EvalResult, other: EvalResult) -> np.ndarray:
    """``(n,)`` whether each example's generated text differs (all false for kinds that do not generate)."""
    a, b = reference.texts, other.texts
    if a is None and b is None:
        return np.zeros(reference.n, dtype=bool)
    a, b = a or ("",) * reference.n, b or ("",) * other.n
    return np.array([x != y for x, y in zip(a, b)], dtype=bool)


def disagreement(reference: EvalResult, other: EvalResult, dtype: str, *, spread_bound: float | None = None
                 ) -> tuple[str | None, int]:
    """The first breach of the contract, in words (``None`` when they agree), and the number of ties;
    ``spread_bound``: part 3's bound (``None``: no bound on the spread)."""
    if [r.id for r in reference.results] != [r.id for r in other.results]:
        return "the two evaluations cover different examples", 0
    a, b = reference.margins, other.margins
    allowed = allowance(dtype, a)
    decides = reference.decisions  # what decides each answer: the decoding gap of a generated one, else the margin
    ties = np.abs(decides) <= allowance(dtype, decides)
    if reference.has_accuracy:
        flipped = np.flatnonzero((reference.correct != other.correct) & ~ties)
        if flipped.size:
            i = int(flipped[0])
            gap = "" if reference.results[i].decision is None else f", decoding gap {decides[i]:.4g}"
            return (f"{flipped.size} example(s) answered differently (first: {reference.results[i].id}, margin "
                    f"{a[i]:.4g} then {b[i]:.4g}{gap})"), int(ties.sum())
    rewritten = _rewritten(reference, other) & ~ties
    if rewritten.any():
        i = int(np.flatnonzero(rewritten)[0])
        return (f"{int(rewritten.sum())} example(s) wrote other text (first: {reference.results[i].id}, "
                f"{reference.results[i].text!r} then {other.results[i].text!r}, decoding gap {decides[i]:.4g})"
                ), int(ties.sum())
    excess = np.abs(a - b) - allowed
    if (excess > 0).any():
        i = int(np.argmax(excess))
        return (f"margins differ by up to {abs(a[i] - b[i]):.3g} (example {reference.results[i].id}: {a[i]:.6g} then "
                f"{b[i]:.6g}; allowed {allowed[i]:.3g} in {dtype})"), int(ties.sum())
    if spread_bound is not None and spread(reference, other) > spread_bound:
        return (f"margins spread by {spread(reference, other):.3g} (root mean square of the relative differences "
                f"over {a.size} examples; allowed {spread_bound:.3g} in {dtype})"), int(ties.sum())
    return None, int(ties.sum()) if reference.has_accuracy else 0
