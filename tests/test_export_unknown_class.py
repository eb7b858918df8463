"""A checkpoint whose class transformers lacks (no auto_map): the best-matching class stands in, and an export
keeps every checkpoint tensor (the ones that class does not use are written through, bit for bit)."""

from __future__ import annotations

import json
import logging

import pytest
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

from helpers.cli import invoke
from headprune.errors import UnsupportedModelError
from headprune.exporter import export, verify_record
from headprune.models import load_model
from helpers import choice_task, save_folder, tiny_config

EXTRA_HEADS = ("topic", "toxicity", "language")  # three classifier heads beside the masked-LM head


def _tensors(folder) -> dict[str, torch.Tensor]:  # noqa: ANN001
    out = {}
    for path in folder.glob("*.safetensors"):
        with safe_open(path, framework="pt") as handle:
            out.update({name: handle.get_tensor(name) for name in handle.keys()})
    return out


@pytest.fixture
def multi_head_bert(tmp_path, tokenizer):  # noqa: ANN001, ANN201
    """A BERT masked-LM saved with three extra classifier heads, under a class name transformers lacks."""
    torch.manual_seed(11)
    model = transformers.BertForMaskedLM(tiny_config("bert", len(tokenizer)))
    folder = tmp_path / "multi-head-bert"
    save_folder(model, tokenizer, folder)
    state = _tensors(folder)
    for i, name in enumerate(EXTRA_HEADS):
        state[f"{name}_classifier.weight"] = torch.randn(2 + i, 32)
        state[f"{name}_classifier.bias"] = torch.randn(2 + i)
    (folder / "model.safetensors").unlink()
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["BertForMaskedLMWithClassifiers"]
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_the_best_matching_class_stands_in_and_says_so(multi_head_bert, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="headprune"):
        lm = load_model(str(multi_head_bert), device="cpu")
    assert lm.model_class.name == "BertForMaskedLM" and lm.model_class.stands_in_for == "BertForMaskedLMWithClassifiers"
    assert sorted(lm.unused_tensors) == sorted(f"{n}_classifier.{p}" for n in EXTRA_HEADS for p in ("bias", "weight"))
    assert "BertForMaskedLMWithClassifiers, which transformers lacks" in caplog.text
    assert "trust" not in caplog.text  # no flag that cannot help


@pytest.mark.parametrize("layout", ["sliced", "dense"])
def test_export_keeps_every_checkpoint_tensor(multi_head_bert, tmp_path, layout) -> None:
    original = _tensors(multi_head_bert)
    out = tmp_path / layout
    record = export(str(multi_head_bert), "L0.H1,L1.H3", layout=layout, verify_task=choice_task(), device="cpu",
                    out=out)
    written = _tensors(out)
    assert written.keys() == original.keys()  # nothing lost, nothing made up
    attention = [n for n in original if ".attention.self." in n or ".attention.output.dense." in n]
    for name, tensor in original.items():
        if name not in attention:
            assert torch.equal(written[name], tensor), name
    assert set(record.passthrough) <= set(record.verification.tensors.kept) and len(record.passthrough) == 6
    assert record.stands_in_for == "BertForMaskedLMWithClassifiers" and record.verification.tensors.ok
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForMaskedLMWithClassifiers"]
    assert "written through unchanged" in (out / "README.md").read_text()
    verify_record(out)
    again = load_model(str(out), device="cpu")  # headprune loads its own export the same way
    assert again.model_class.name == "BertForMaskedLM"


def test_formats_that_cannot_hold_the_extra_tensors_refuse(multi_head_bert, tmp_path) -> None:
    with pytest.raises(UnsupportedModelError, match="a safetensors export writes them through"):
        export(str(multi_head_bert), "L0.H1", format="onnx", verify_task=choice_task(), device="cpu",
               out=tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_cli_export_of_the_unknown_class(multi_head_bert, tmp_path) -> None:
    result = invoke("export", str(multi_head_bert), "--heads", "L1.H0", "--out",
                    str(tmp_path / "pruned"))
    assert result.exit_code == 0, result.output
    assert "trust-remote-code" not in result.output
