"""The determinism check find runs before screening: a sound model agrees with itself in another batch order, a
batch-dependent one stops the run, and "agrees" means the stated tolerance of each dtype."""

from __future__ import annotations

import copy
import json
import logging

import pytest
import torch

from headprune.core.devices import widened
from headprune.errors import InternalCheckError
from headprune.evaluation import Evaluator
from headprune.evaluation.contract import MARGIN_TOLERANCE
from headprune.search.determinism import CALIBRATION_EXAMPLES, KEY, check, compare_passes, reordered_pass
from headprune.search.find import find
from headprune.search.journal import JOURNAL_NAME, Journal
from headprune.tasks import Example, Task
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


def test_a_float32_run_is_not_calibrated(tmp_path, tokenizer) -> None:
    lm = build_tiny("llama", tokenizer, seed=3)
    find(lm, random_choice_task(40, seed=1), out=tmp_path, **SMALL)
    keys = [json.loads(line).get("key") for line in (tmp_path / JOURNAL_NAME).read_text().splitlines()[1:]]
    assert not any(k.startswith("determinism|first") for k in keys)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_precision_run_is_calibrated_in_float32_and_journalled(tmp_path, tokenizer, dtype, caplog) -> None:
    lm = build_tiny("llama", tokenizer, seed=3)
    lm.model.to(dtype)
    with caplog.at_level(logging.INFO, logger="headprune"):
        find(lm, random_choice_task(100, seed=1), out=tmp_path, **{**SMALL, "discovery": 80})
    lines = [json.loads(line) for line in (tmp_path / JOURNAL_NAME).read_text().splitlines()[1:]]
    keys = [line.get("key") for line in lines]
    first = f"determinism|first {CALIBRATION_EXAMPLES}"
    assert keys[2:6] == [f"{first},float32", f"{first},float32,reversed,half-batch", first, KEY]
    assert all(p.dtype == dtype for p in lm.model.parameters())  # narrowed again after the float32 passes
    wide, narrow = lines[2], lines[4]
    assert wide["margins"] != narrow["margins"]  # the float32 passes did compute in float32
    assert "allowed: twice" in caplog.text and "in float32 those examples spread by" in caplog.text


def test_a_batch_dependent_half_precision_model_is_stopped_by_the_float32_check(tmp_path, tokenizer) -> None:
    lm = build_tiny("llama", tokenizer, seed=3)
    lm.model.to(torch.bfloat16)
    handle = lm.model.get_input_embeddings().register_forward_hook(
        lambda module, args, output: output + 0.5 * output.mean(dim=0, keepdim=True))
    try:
        with pytest.raises(InternalCheckError, match="widened to float32 .* another batch order"):
            find(lm, random_choice_task(40, seed=1), out=tmp_path, **SMALL)
    finally:
        handle.remove()
    keys = [json.loads(line).get("key") for line in (tmp_path / JOURNAL_NAME).read_text().splitlines()[1:]]
    assert KEY not in keys  # stopped before the full pass in the other batch order


def test_widened_computes_in_float32_and_gives_back_the_very_tensors(tokenizer) -> None:
    lm = build_tiny("llama", tokenizer, seed=5)
    lm.model.to(torch.bfloat16)
    lm.model.model.rotary_emb.inv_freq = lm.model.model.rotary_emb.inv_freq.float()  # a float32 buffer stays one
    reference = copy.deepcopy(lm.model).float()  # a float32 copy of the same (rounded) weights
    before = {name: (t, t.data_ptr(), t.dtype) for name, t in [*lm.model.named_parameters(), *lm.model.named_buffers()]}
    ids = torch.tensor([[5, 9, 13, 2]])
    with widened(lm.model) as done, torch.no_grad():
        assert done and all(p.dtype == torch.float32 for p in lm.model.parameters())
        assert torch.equal(lm.model(ids).logits, reference(ids).logits)
    after = dict([*lm.model.named_parameters(), *lm.model.named_buffers()])
    for name, (tensor, pointer, dtype) in before.items():
        assert after[name] is tensor and tensor.data_ptr() == pointer and tensor.dtype == dtype, name
    assert lm.model.model.rotary_emb.inv_freq.dtype == torch.float32 and lm.model.lm_head.weight.dtype == torch.bfloat16


def test_a_model_that_cannot_be_widened_is_checked_per_example_and_says_so(tokenizer, caplog) -> None:
    lm = build_tiny("llama", tokenizer, seed=3)
    lm.model.to(torch.bfloat16)
    meta = torch.nn.Parameter(torch.empty(2, dtype=torch.bfloat16, device="meta"))  # offloaded by a device map
    lm.model.model.register_parameter("offloaded", meta)
    evaluator = Evaluator(lm, random_choice_task(24, seed=1), batch_size=8)
    with caplog.at_level(logging.WARNING, logger="headprune"):
        found = check(evaluator, evaluator.run(()), Journal(None, {}))
    assert "cannot be widened" in caplog.text and "allowed" not in found and "agrees" in found


def test_the_other_batch_order_changes_the_batches_even_when_they_are_cut_smaller_than_the_batch_size(
        tokenizer) -> None:
    # Batches are cut by length below --batch-size (another batch costs less than the padding it saves): halving
    # the batch size alone left every batch as it was (found on SmolLM2 sentiment n=16 at --batch-size 16, where
    # the batch-mixing bug passed the check). The second pass halves the largest batch actually run.
    lm = build_tiny("llama", tokenizer, seed=3)
    lm.model.get_input_embeddings().register_forward_hook(
        lambda module, args, output: output + 0.5 * output.mean(dim=0, keepdim=True))
    words = "the film is a dull delight movie with nothing to say".split()
    task = Task("lengths", "choice", tuple(
        Example(f"e{i}", prompt=" ".join(words[j % len(words)] for j in range(3 + 40 * (i % 3))),
                choices=(" positive", " negative"), answer=i % 2) for i in range(12)))
    evaluator = Evaluator(lm, task, batch_size=2 * len(task))
    assert 1 < evaluator.largest_batch <= evaluator.batch_size // 2  # cut by length well below the batch size
    first, second = evaluator.run(()), reordered_pass(evaluator)
    assert max(abs(a.margin - b.margin) for a, b in zip(first.results, second.results)) > 1e-3
