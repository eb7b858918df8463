"""Trust checks built into the product: determinism, the run environment, locks, split, fired hooks."""

from __future__ import annotations

import json

import pytest
import torch

from headprune.errors import InternalCheckError, ResultFileError
from headprune.search.determinism import KEY, MARGIN_TOLERANCE, compare_passes, reordered_pass
from headprune.search.find import find
from headprune.search.journal import JOURNAL_NAME
from helpers import build_tiny, random_choice_task

SMALL = dict(discovery=24, heldout=16, nominees=2, max_heads=2, finalists=1, batch_size=8)


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


def test_resume_refuses_another_environment(tmp_path, tokenizer) -> None:
    lm = build_tiny("llama", tokenizer, seed=1)
    task = random_choice_task(40)
    find(lm, task, out=tmp_path, **SMALL)
    header = json.loads((tmp_path / JOURNAL_NAME).read_text().splitlines()[0])["settings"]
    import transformers

    import headprune

    threads = torch.get_num_threads()
    assert header["environment"] == {"headprune": headprune.__version__, "torch": torch.__version__,
                                     "transformers": transformers.__version__,
                                     "python": header["environment"]["python"], "dtype": "float32",
                                     "device": "cpu", "threads": threads}
    other = 1 if threads != 1 else 2
    torch.set_num_threads(other)
    try:
        with pytest.raises(ResultFileError, match=f"environment differs .*threads: {threads} then, {other} now"):
            find(lm, task, out=tmp_path, resume=True, **SMALL)
    finally:
        torch.set_num_threads(threads)
    find(lm, task, out=tmp_path, resume=True, **SMALL)  # the same environment resumes
