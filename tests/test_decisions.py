"""The determinism check's exemptions and allowances: a tie is judged by what decides the answer (the decoding
gap of greedy decoding for generated answers, the margin otherwise), and in half precisions the margins get an
absolute floor per example and a bound on their spread, so the check neither cries wolf at scale nor lets a
systematic batch dependence through."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headprune.errors import InternalCheckError
from headprune.evaluation import EvalResult, ExampleResult, evaluate
from headprune.evaluation.contract import ABSOLUTE_TOLERANCE, disagreement
from headprune.search.determinism import compare_passes
from helpers import build_tiny, generate_task


def _pass(kind: str, correct: list[bool], margins: list[float], decisions: list[float | None]) -> EvalResult:
    return EvalResult("t", kind, tuple(ExampleResult(f"e{i}", c, m, text="" if d is not None else None, decision=d)
                                       for i, (c, m, d) in enumerate(zip(correct, margins, decisions))))


def test_a_generated_answer_is_a_tie_by_its_decoding_gap_not_its_margin() -> None:
    # e0: the target's teacher-forced margin is far from zero, but greedy chose its stop token by 1e-6 over
    # another: a flip there is rounding, not batch dependence.
    first = _pass("generate", [True, False], [3.0, -2.0], [1e-6, 4.0])
    second = _pass("generate", [False, False], [3.0, -2.0], [1e-6, 4.0])
    assert compare_passes(first, second, "float32") == 1
    # e1: a margin near zero, but greedy decided every step by 2 nats: a flip is a real disagreement.
    first = _pass("generate", [True, False], [3.0, 1e-6], [5.0, 2.0])
    second = _pass("generate", [True, True], [3.0, 1e-6], [5.0, 2.0])
    with pytest.raises(InternalCheckError, match="answered differently .* decoding gap 2"):
        compare_passes(first, second, "float32")


def test_choice_ties_stay_judged_by_the_margin() -> None:
    first = _pass("choice", [True, True], [1e-6, 3.0], [None, None])
    assert compare_passes(first, _pass("choice", [False, True], [-1e-6, 3.0], [None, None]), "float32") == 1
    with pytest.raises(InternalCheckError, match="answered differently"):
        compare_passes(first, _pass("choice", [True, False], [1e-6, -3.0], [None, None]), "float32")


def test_half_precision_allows_rounding_quanta_at_any_size_but_not_a_systematic_shift() -> None:
    rng = np.random.default_rng(0)
    n = 100_000
    margins = rng.normal(0, 4, n)
    # Intact in bfloat16: each margin moves by whole rounding quanta of logits near 20 (0.125), mostly none,
    # a few by two, on every scale of margin; at n = 100,000 the largest move is what a per-example relative
    # bound of 5% would have refused.
    moved = margins + 0.125 * rng.choice([-2, -1, 0, 1, 2], n, p=[0.005, 0.1, 0.79, 0.1, 0.005])
    keep = np.sign(moved) == np.sign(margins)
    first = _pass("choice", list(margins[keep] > 0), list(margins[keep]), [None] * int(keep.sum()))
    second = _pass("choice", list(moved[keep] > 0), list(moved[keep]), [None] * int(keep.sum()))
    assert disagreement(first, second, "bfloat16")[0] is None
    assert np.max(np.abs(moved - margins) / np.maximum(1, np.abs(margins))) > 0.05  # the old rule's refusal
    # A batch-mixing bug moves every margin a little: each within its allowance, the spread far beyond.
    shifted = margins[keep] + 0.3 * rng.choice([-1, 1], int(keep.sum()))
    third = _pass("choice", list(shifted > 0), list(shifted), [None] * int(keep.sum()))
    problem, _ = disagreement(first, third, "bfloat16")
    assert problem is not None and "spread" in problem
    assert ABSOLUTE_TOLERANCE["bfloat16"] > 0.3 and ABSOLUTE_TOLERANCE["float32"] == 0.0


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_the_decoding_gap_is_the_smallest_step_gap_of_transformers_greedy(tokenizer, family) -> None:
    """Evaluator's decision gap against transformers' own greedy scores, computed alone (batch 1): the smallest
    top-1 minus top-2 gap over the steps up to the one that wrote the newline (or all steps)."""
    lm = build_tiny(family, tokenizer, seed=2)
    task = generate_task()
    result = evaluate(lm, task, batch_size=4)
    for example, got in zip(task.examples, result.results):
        ids = torch.tensor([tokenizer(example.prompt)["input_ids"]])
        with torch.no_grad():
            out = lm.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                    max_new_tokens=task.max_new_tokens, pad_token_id=0, output_logits=True,
                                    return_dict_in_generate=True)
        tokens = out.sequences[0, ids.shape[1]:].tolist()
        gaps = []
        for step, logits in enumerate(out.logits):
            top = logits[0].float().topk(2).values
            gaps.append(float(top[0] - top[1]))
            if "\n" in tokenizer.decode(tokens[: step + 1], skip_special_tokens=True) or tokens[step] == 1:
                break
        assert got.decision == pytest.approx(min(gaps), abs=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["sentiment:n=40", "arithmetic:n=40"])
def test_bfloat16_check_on_smollm2_passes_intact_and_catches_batch_mixing(spec: str) -> None:
    """SmolLM2-135M in bfloat16 on a CPU: the intact model agrees with itself in another batch order (the old
    per-example 5% rule refused sentiment at 40 examples: a margin of 1 moved to 1.125, one rounding quantum), and
    the batch-mixing bug of tests/test_trust.py (each row sees the batch mean of the embeddings) is refused."""
    from headprune.evaluation import Evaluator
    from headprune.models import load_model
    from headprune.search.determinism import reordered_pass
    from headprune.tasks import load_task

    lm = load_model("smollm2-135m", dtype="bfloat16", device="cpu")
    task = load_task(spec)
    evaluator = Evaluator(lm, task, batch_size=16)
    compare_passes(evaluator.run(), reordered_pass(evaluator), "bfloat16")
    handle = lm.model.get_input_embeddings().register_forward_hook(
        lambda module, args, output: output + 0.5 * output.mean(dim=0, keepdim=True))
    try:
        mixed = Evaluator(lm, task, batch_size=16)
        with pytest.raises(InternalCheckError, match="determinism check"):
            compare_passes(mixed.run(), reordered_pass(mixed), "bfloat16")
    finally:
        handle.remove()
