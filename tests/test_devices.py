"""Devices and precision: every path that takes a device runs on the CPU; bfloat16 works end to end."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from helpers.cli import invoke
from headprune.core.devices import resolve_device, resolve_dtype
from headprune.errors import SearchSettingsError
from headprune.evaluation import evaluate
from headprune.exporter import export, read_record
from headprune.heads import parse_heads
from headprune.loading.models import load, load_model
from headprune.search.find import find
from helpers import build_tiny, choice_task, random_choice_task, save_folder

TINY_SEED = 9  # the weights of conftest's tiny_folder in this module


def test_device_and_dtype_names() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("bfloat16", torch.device("cpu")) == torch.bfloat16
    with pytest.raises(SearchSettingsError, match="unknown device 'tpu'"):
        resolve_device("tpu")
    with pytest.raises(SearchSettingsError, match="unknown dtype"):
        resolve_dtype("float8", torch.device("cpu"))
    if not torch.cuda.is_available():
        with pytest.raises(SearchSettingsError, match="no CUDA GPU"):
            resolve_device("cuda:1")


@pytest.mark.parametrize("cuda, mps, expected", [(True, True, torch.device("cuda", 0)),
                                                (False, True, torch.device("mps")),
                                                (False, False, torch.device("cpu"))])
def test_auto_prefers_cuda_then_mps_then_the_cpu(monkeypatch, cuda, mps, expected) -> None:  # noqa: ANN001
    """What this machine has is set, not read: each branch of ``auto`` against a fixed answer."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    assert resolve_device("auto") == expected


def test_auto_on_this_machine_is_the_accelerator_it_has() -> None:
    # An expectation from outside torch: the CUDA driver's device nodes (Linux), else Apple's MPS, else the CPU.
    import glob
    import platform

    gpu = bool(glob.glob("/dev/nvidia[0-9]*")) and torch.cuda.is_available()
    mac = platform.system() == "Darwin" and torch.backends.mps.is_available()
    expected = "cuda" if gpu else "mps" if mac else "cpu"
    assert resolve_device("auto").type == expected


def test_a_missing_gpu_is_one_line_and_exit_2(tiny_folder) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")  # the refusal is about machines without one
    result = invoke("eval", str(tiny_folder), "--task", "sentiment:n=2", "--device", "cuda", catch_exceptions=True)
    assert result.exit_code == 2 and "no CUDA GPU" in result.output and "Traceback" not in result.output


def test_bfloat16_runs_find_export_and_verify_end_to_end(tiny_folder, tmp_path) -> None:
    lm = load_model(str(tiny_folder), dtype="bfloat16", device="cpu")
    assert lm.dtype == torch.bfloat16 and lm.device.type == "cpu"
    task = random_choice_task(80, seed=4)
    result = find(lm, task, discovery=30, heldout=30, nominees=3, max_heads=2, finalists=2, screen="attribution",
                  candidates=4, batch_size=8, out=tmp_path / "run")
    assert result.finalists and all(np.isfinite(row.paired.margin_change) for row in result.screen)
    record = export(lm, result, verify_task=task, allow_unconfirmed=True, out=tmp_path / "pruned")
    logits = record.verification.logits
    assert logits.dtype == "bfloat16" and logits.tolerance == 2e-2 and logits.max_abs_diff <= logits.allowed
    assert record.verification.task.disagreements == 0
    reloaded = load(tmp_path / "pruned")
    assert reloaded.dtype == torch.bfloat16  # the export keeps the precision it was made and verified in
    assert json.loads((tmp_path / "pruned" / "config.json").read_text())["dtype"] == "bfloat16"
    assert read_record(tmp_path / "pruned").verification.logits.dtype == "bfloat16"


def test_margins_are_float32_whatever_the_dtype(tiny_folder) -> None:
    # The same model in float32 and bfloat16: answers may differ at ties, margins are close and float32-made.
    full = load_model(str(tiny_folder), dtype="float32")
    half = load_model(str(tiny_folder), dtype="bfloat16")
    task = choice_task()
    a, b = evaluate(full, task), evaluate(half, task)
    assert b.margins.dtype == np.float64 and np.abs(a.margins - b.margins).max() < 0.1


def test_export_keeps_the_checkpoints_dtype_unless_asked(tiny_folder, tmp_path) -> None:
    half = tmp_path / "half"
    model = load_model(str(tiny_folder), dtype="float32").model
    save_folder(copy.deepcopy(model).to(torch.bfloat16), load_model(str(tiny_folder)).tokenizer, half)
    kept = export(str(half), "L0.H1", verify_task=choice_task(), out=tmp_path / "kept")
    asked = export(str(half), "L0.H1", verify_task=choice_task(), dtype="float32", out=tmp_path / "asked")
    assert kept.verification.logits.dtype == "bfloat16" and asked.verification.logits.dtype == "float32"
    assert asked.verification.logits.tolerance == 1e-5


def test_resume_refuses_another_dtype(tiny_folder, tmp_path) -> None:
    task = random_choice_task(60, seed=1)
    settings = dict(discovery=20, heldout=20, nominees=2, max_heads=2, finalists=1, out=tmp_path)
    find(str(tiny_folder), task, dtype="float32", **settings)
    from headprune.errors import ResultFileError

    with pytest.raises(ResultFileError, match="dtype"):
        find(str(tiny_folder), task, dtype="bfloat16", resume=True, **settings)


def test_ablation_hook_follows_the_models_dtype(tokenizer) -> None:
    lm = build_tiny("gpt2", tokenizer, seed=2)
    half = copy.deepcopy(lm)
    half.model.to(torch.bfloat16)
    means = torch.randn(lm.grid.num_layers, lm.grid.num_heads, lm.grid.head_dim)
    result = evaluate(half, choice_task(), heads=parse_heads("L0.H1"), mode="mean", means=means)
    assert np.isfinite(result.margins).all()


def test_a_model_spread_by_a_device_map_gives_the_same_search(tiny_folder, tmp_path) -> None:
    """Big-model dispatch (accelerate hooks): with a CPU memory cap the upper layers go to disk, so ablation,
    the layer cache and the shared prefix run across two devices; the search must not notice. Every GPU this
    machine has is capped at nothing, and the dtype is named, so the placement is the same with or without one
    (tests/test_gpu.py spreads a model over a GPU and the CPU)."""
    task = random_choice_task(60, seed=4)
    options = dict(discovery=36, heldout=24, nominees=4, max_heads=2, finalists=2, batch_size=8, device="cpu")
    no_gpu = {index: "0GiB" for index in range(torch.cuda.device_count())}
    spread = load_model(str(tiny_folder), dtype="float32", device_map="auto", max_memory={**no_gpu, "cpu": "150KB"})
    placed = set(spread.model.hf_device_map.values())
    assert {"cpu", "disk"} <= placed, placed
    plain = find(str(tiny_folder), task, **options)
    dispatched = find(spread, task, **options)
    assert [s.heads for s in dispatched.sets] == [s.heads for s in plain.sets]
    assert dispatched.screen == plain.screen or all(
        a.head == b.head and a.paired.gain == b.paired.gain and abs(a.paired.margin_change - b.paired.margin_change)
        < 1e-5 for a, b in zip(dispatched.screen, plain.screen))
    assert dispatched.verdict == plain.verdict


@pytest.mark.parametrize("args, says", [
    (["--max-memory", "cpu=150KB"], "--max-memory needs --device-map"),
    (["--device-map", "auto", "--max-memory", "gpu0=1GB"], "is not DEVICE=SIZE"),
    (["--device-map", "auto", "--max-memory", "cpu=lots"], "is not DEVICE=SIZE"),
])
def test_bad_placement_options_are_one_line_and_exit_2(tiny_folder, args, says) -> None:  # noqa: ANN001
    done = invoke("eval", str(tiny_folder), "--task", "sentiment", "--limit", "4", *args, catch_exceptions=True)
    assert done.exit_code == 2, done.output
    assert says in done.output and "Traceback" not in done.output
