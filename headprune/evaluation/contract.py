"""What "the same results" means in headprune, stated once.

Two evaluations of the same examples agree when they give the same answer on every example (except ties:
where the reference margin lies within the tolerance of zero) and every margin is within
``MARGIN_TOLERANCE[dtype] * max(1, |reference margin|)``. This is the contract of the fast paths (a shared
prompt prefix computed once, layer inputs replayed from the intact run) against a plain full forward pass,
and of the intact model against itself in another batch order (``headprune.search.determinism``).
"""

from __future__ import annotations

import numpy as np

from headprune.evaluation.results import EvalResult

# Relative margin tolerance per dtype: float32 rounding across batch shapes and cached keys/values is ~1e-6
# relative; half precisions keep 8 (bfloat16) or 11 (float16) mantissa bits, and their errors grow with depth.
MARGIN_TOLERANCE = {"float64": 1e-8, "float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}


def tolerance(dtype: str) -> float:
    return MARGIN_TOLERANCE.get(dtype, MARGIN_TOLERANCE["bfloat16"])


def disagreement(reference: EvalResult, other: EvalResult, dtype: str) -> tuple[str | None, int]:
    """The first breach of the contract, in words (``None`` when they agree), and the number of ties."""
    if [r.id for r in reference.results] != [r.id for r in other.results]:
        return "the two evaluations cover different examples", 0
    a, b = reference.margins, other.margins
    allowed = tolerance(dtype) * np.maximum(1.0, np.abs(a))
    decides = reference.decisions  # what decides each answer: the decoding gap of a generated one, else the margin
    ties = np.abs(decides) <= tolerance(dtype) * np.maximum(1.0, np.abs(decides))
    if reference.has_accuracy:
        flipped = np.flatnonzero((reference.correct != other.correct) & ~ties)
        if flipped.size:
            i = int(flipped[0])
            gap = "" if reference.results[i].decision is None else f", decoding gap {decides[i]:.4g}"
            return (f"{flipped.size} example(s) answered differently (first: {reference.results[i].id}, margin "
                    f"{a[i]:.4g} then {b[i]:.4g}{gap})"), int(ties.sum())
    excess = np.abs(a - b) - allowed
    if (excess > 0).any():
        i = int(np.argmax(excess))
        return (f"margins differ by up to {abs(a[i] - b[i]):.3g} (example {reference.results[i].id}: {a[i]:.6g} then "
                f"{b[i]:.6g}; allowed {allowed[i]:.3g} in {dtype})"), int(ties.sum())
    return None, int(ties.sum()) if reference.has_accuracy else 0
