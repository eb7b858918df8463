"""export of heads given by hand without a task: outputs verified on the built-in text sample, no task claimed."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from helpers.cli import invoke
from headprune.core.folder_lock import lock_path
from headprune.errors import ExportSettingsError, HeadSpecError, VerificationError
from headprune.exporter import RECORD_NAME, export
from headprune.exporter.sample import SAMPLE_TEXTS
from headprune.loading.models import wrap_model
from helpers import ALL_FAMILIES, build_tiny, save_folder, tiny_config


def _classifier(tokenizer):  # noqa: ANN001, ANN202
    torch.manual_seed(3)
    model = transformers.LlamaForSequenceClassification(tiny_config("llama", len(tokenizer), num_labels=3))
    return wrap_model(model.eval(), tokenizer, name="tiny-llama-classifier")


@pytest.mark.parametrize("family", [*ALL_FAMILIES, "classifier"])
def test_heads_by_hand_verify_every_output_on_the_sample(tokenizer, tmp_path, family) -> None:
    lm = _classifier(tokenizer) if family == "classifier" else build_tiny(family, tokenizer, seed=8)
    record = export(lm, "L0.H1,L1.H2", out=tmp_path / "pruned")
    logits = record.verification.logits
    assert record.verification.task is None  # nothing re-measured, and the record says so by having no task check
    assert logits.examples == len(SAMPLE_TEXTS) and logits.tokens >= 8 * len(SAMPLE_TEXTS)
    assert logits.max_abs_diff <= logits.allowed and logits.outputs  # outputs were really compared
    saved = json.loads((tmp_path / "pruned" / RECORD_NAME).read_text())
    assert saved["verification"]["task"] is None
    card = (tmp_path / "pruned" / "README.md").read_text()
    assert "No task was re-measured" in card and "text sample" in card


def test_the_sample_still_gates_a_wrong_export(tokenizer, tmp_path, monkeypatch) -> None:
    """A 0.1% error in one output projection must fail the sample's logit check: nothing is written."""
    import headprune.surgery.slicing as slicing

    real = slicing.slice_model

    def broken(lm, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        model = real(lm, *args, **kwargs)
        with torch.no_grad():
            lm.adapter.output_projection(model, 0).weight.mul_(1.001)
        return model

    monkeypatch.setattr(slicing, "slice_model", broken)
    with pytest.raises(VerificationError, match="nothing was written"):
        export(build_tiny("llama", tokenizer, seed=8), "L0.H1", out=tmp_path / "never")
    assert [p.name for p in tmp_path.iterdir()] == [lock_path(tmp_path / "never").name]  # the lock's empty file


def test_mean_ablation_by_hand_needs_a_task(tokenizer, tmp_path) -> None:
    with pytest.raises(ExportSettingsError, match="give verify_task"):
        export(build_tiny("gpt2", tokenizer, seed=8), "L0.H1", ablation="mean", out=tmp_path / "never")
    assert list(tmp_path.iterdir()) == []


def test_cli_export_by_hand_without_a_task(tokenizer, tmp_path) -> None:
    lm = build_tiny("llama", tokenizer, seed=8)
    save_folder(lm.model, tokenizer, tmp_path / "model")
    result = invoke("export", str(tmp_path / "model"), "--heads", "L1.H0", "--out",
                    str(tmp_path / "pruned"))
    assert result.exit_code == 0, result.output
    assert f"on a built-in text sample ({len(SAMPLE_TEXTS)} texts); no task re-measured" in result.output


def test_a_long_head_list_is_read_as_heads_not_as_a_path(tokenizer, tmp_path) -> None:
    spec = ",".join(f"L{layer}.H{head}" for layer in range(40) for head in range(8))  # longer than a file name
    assert len(spec) > 1000
    with pytest.raises(HeadSpecError, match="out of range"):
        export(build_tiny("llama", tokenizer, seed=8), spec, out=tmp_path / "never")
