"""The determinism check find runs before screening: a sound model agrees with itself in another batch order, a
batch-dependent one stops the run, and "agrees" means the stated tolerance of each dtype."""

from __future__ import annotations

import json

import pytest

from headprune.errors import InternalCheckError
from headprune.evaluation.contract import MARGIN_TOLERANCE
from headprune.search.determinism import KEY, compare_passes, reordered_pass
from headprune.search.find import find
from headprune.search.journal import JOURNAL_NAME
from helpers import SMALL, build_tiny, random_choice_task


def test_determinism_check_passes_on_a_sound_model_and_is_journalled(tmp_path, tokenizer) -> None:
    lm = build_tiny("llama", tokenizer, seed=3)
    find(lm, random_choice_task(40, seed=1), out=tmp_path, **SMALL)
    lines = [json.loads(line) for line in (tmp_path / JOURNAL_NAME).read_text().splitlines()]
    keys = [line.get("key") for line in lines[1:]]
    assert keys[:3] == ["discovery|", "heldout|", KEY]  # before the first ablated condition
    first, second = lines[1], lines[3]
    assert first["correct"] == second["correct"]
    diff = max(abs(a - b) / max(1.0, abs(a)) for a, b in zip(first["margins"], second["margins"]))
    assert diff <= MARGIN_TOLERANCE["float32"]


def test_a_batch_dependent_model_stops_the_run(tmp_path, tokenizer) -> None:
    lm = build_tiny("llama", tokenizer, seed=3)
    # A real batch dependence (as a BatchNorm in training mode would have): each row sees the batch mean.
    handle = lm.model.get_input_embeddings().register_forward_hook(
        lambda module, args, output: output + 0.5 * output.mean(dim=0, keepdim=True))
    try:
        with pytest.raises(InternalCheckError, match="determinism check: .*batch order"):
            find(lm, random_choice_task(40, seed=1), out=tmp_path, **SMALL)
    finally:
        handle.remove()
    # Nothing was screened against the untrustworthy baseline.
    keys = [json.loads(line).get("key") for line in (tmp_path / JOURNAL_NAME).read_text().splitlines()[1:]]
    assert not any(k.startswith("discovery|L") for k in keys)


def test_compare_passes_contract(tokenizer) -> None:
    from headprune.evaluation import Evaluator

    lm = build_tiny("gpt2", tokenizer, seed=4)
    evaluator = Evaluator(lm, random_choice_task(30, seed=5), batch_size=8)
    first, second = evaluator.run(()), reordered_pass(evaluator)
    compare_passes(first, second, "float32")  # a sound model agrees with itself
    from dataclasses import replace

    worst = int(abs(first.margins).argmax())
    nudged = list(second.results)
    nudged[worst] = replace(nudged[worst], margin=nudged[worst].margin * (1 + 3e-4))
    with pytest.raises(InternalCheckError, match="margins differ"):
        compare_passes(first, replace(second, results=tuple(nudged)), "float32")
    compare_passes(first, replace(second, results=tuple(nudged)), "bfloat16")  # within bfloat16's tolerance
