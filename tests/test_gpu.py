"""The GPU paths, run where a CUDA GPU is (marked ``gpu``: skipped with the reason elsewhere, see conftest.py):
find in bfloat16 on cuda, export and verification from a cuda model, a device map across the GPU and the CPU,
out-of-memory halving, and gpu_check's contracts at a tiny size. They run in one pytest-xdist worker (one GPU, and
the out-of-memory test caps this process's share of it)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from headprune.evaluation import Evaluator, evaluate
from headprune.evaluation.contract import disagreement
from headprune.exporter import export
from headprune.heads import parse_heads
from headprune.loading.models import load, load_model, wrap_model
from headprune.search.find import find
from headprune.surgery.ablation import ablated
from headprune.tasks import Example, Task
from helpers import choice_task, random_choice_task

pytestmark = [pytest.mark.gpu, pytest.mark.xdist_group("gpu")]

TINY_SEED = 11  # the weights of conftest's tiny_folder in this module
SEARCH = dict(discovery=40, heldout=40, nominees=3, max_heads=2, finalists=2, batch_size=8)


def test_find_in_bfloat16_on_cuda_screens_every_head_and_agrees_with_float32(tiny_folder, tmp_path) -> None:
    task = random_choice_task(80, seed=4)
    lm = load_model(str(tiny_folder), device="cuda")
    assert lm.device.type == "cuda" and lm.dtype == torch.bfloat16  # what auto picks on a GPU
    result = find(lm, task, out=tmp_path / "run", **SEARCH)
    assert sorted(row.head for row in result.screen) == sorted(str(h) for h in lm.grid.all_heads())
    assert result.finalists and all(np.isfinite(row.paired.margin_change) for row in result.screen)
    # The intact model in bfloat16 on the GPU answers as float32 on the CPU outside near-ties.
    reference = evaluate(load_model(str(tiny_folder), device="cpu"), task)
    drift, _ = disagreement(reference, evaluate(lm, task), "bfloat16")
    assert drift is None, drift


@pytest.mark.parametrize("dtype, tolerance", [("float32", 1e-5), ("bfloat16", 2e-2)])
def test_an_export_from_a_cuda_model_is_verified_and_equals_the_masked_original_on_the_cpu(
        tiny_folder, tmp_path, dtype, tolerance) -> None:  # noqa: ANN001
    lm = load_model(str(tiny_folder), dtype=dtype, device="cuda")
    heads = parse_heads("L0.H1,L1.H3")
    record = export(lm, heads, verify_task=choice_task(), out=tmp_path / "pruned")
    logits = record.verification.logits
    assert logits.dtype == dtype and logits.tolerance == tolerance and logits.max_abs_diff <= logits.allowed
    assert record.verification.task.disagreements == 0
    # Written from the GPU, read on the CPU: the masked original's logits (float32 exactly; bfloat16 within its
    # rounding of logits under 1 here).
    reference = load_model(str(tiny_folder), dtype=dtype, device="cpu")
    ids = torch.tensor([[5, 9, 14, 3, 27, 8, 11]])
    with torch.no_grad(), ablated(reference, heads):
        want = reference.model(input_ids=ids).logits.float()
    with torch.no_grad():
        got = load(tmp_path / "pruned", device="cpu").model(input_ids=ids).logits.float()
    torch.testing.assert_close(got, want, atol=1e-4 if dtype == "float32" else 5e-2, rtol=0)


def test_a_device_map_across_the_gpu_and_the_cpu_gives_the_cpu_search(tiny_folder) -> None:
    task = random_choice_task(60, seed=4)
    spread = load_model(str(tiny_folder), dtype="float32", device_map="auto", max_memory={0: "150KB", "cpu": "4GiB"})
    placed = set(spread.model.hf_device_map.values())
    assert 0 in placed and "cpu" in placed, placed
    plain = find(str(tiny_folder), task, device="cpu", **SEARCH)
    dispatched = find(spread, task, **SEARCH)
    assert [s.heads for s in dispatched.sets] == [s.heads for s in plain.sets]
    for a, b in zip(dispatched.screen, plain.screen):
        assert a.head == b.head and a.paired.gain == b.paired.gain
        assert abs(a.paired.margin_change - b.paired.margin_change) < 1e-4  # float32 on two devices: rounding
    assert dispatched.verdict == plain.verdict


def _long_task(tokenizer, n: int, words: int) -> Task:  # noqa: ANN001
    """``n`` choice examples of about ``words`` tokens each, no prefix in common (one sequence each)."""
    vocabulary = "the film is a delight from start to finish dull and lifeless movie with nothing to say".split()
    rng = np.random.default_rng(0)
    return Task("long", "choice", tuple(
        Example(f"l{i}", prompt=" ".join(rng.choice(vocabulary, size=words)), choices=(" yes", " no"), answer=i % 2)
        for i in range(n)))


def test_out_of_memory_halves_the_batches_with_a_warning_and_the_same_results(caplog) -> None:
    from headprune.testing import bpe_tokenizer, llama_config, random_llama

    tokenizer = bpe_tokenizer()
    config = llama_config("tiny", max_position_embeddings=2048)
    lm = wrap_model(random_llama(config, torch.float32, "cuda"), tokenizer, name="tiny-long")
    lm.model.set_attn_implementation("eager")  # (B, heads, T, T) scores: memory grows with the batch
    task = _long_task(tokenizer, 32, 1000)
    options = dict(share_prefix=False)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    reference = Evaluator(lm, task, batch_size=4, **options).run()
    need = torch.cuda.max_memory_allocated() - before  # what a batch of 4 takes
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(0).total_memory
    # Room for about 2.5 batches of 4: a batch of 32 (8 x) cannot fit, one of 8 can.
    torch.cuda.set_per_process_memory_fraction(min(1.0, (torch.cuda.memory_reserved() + 2.5 * need) / total))
    try:
        evaluator = Evaluator(lm, task, batch_size=32, **options)
        with caplog.at_level(logging.WARNING, logger="headprune"):
            halved = evaluator.run()
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    assert "out of memory" in caplog.text and evaluator.batch_size < 32
    assert [r.correct for r in halved.results] == [r.correct for r in reference.results]
    np.testing.assert_allclose(halved.margins, reference.margins, atol=1e-4)


def test_gpu_check_contracts_and_parts_on_the_gpu(tmp_path) -> None:
    from scripts.bench import gpu_check

    report = gpu_check.main(["--configs", "tiny", "--layers", "2", "--n", "16", "--conditions", "2", "--device",
                             "cuda", "--json", str(tmp_path / "check.json")])
    assert report["device"] == torch.cuda.get_device_name(0) and report["measured_bandwidth_gbs"] > 0
    (config,) = report["results"]
    for kind in ("choice", "generate"):
        assert config[f"{kind}_fast_path_contract"] == "holds"
        assert config[f"{kind}_vs_float32"].startswith("holds")
    assert all(row["peak_memory_gib"] > 0 for row in config["rows"])
    assert config["export"]["max_abs_logit_diff"] <= config["export"]["allowed"]
