"""A checkpoint whose class transformers lacks (no auto_map): the best-matching class stands in, and an export
keeps every checkpoint tensor (the ones that class does not use are written through, bit for bit), whether the
checkpoint is safetensors or an older ``pytorch_model.bin`` (one file, or shards with an index), which is read
with ``torch.load(weights_only=True)`` and never run."""

from __future__ import annotations

import json
import logging

import pytest
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

from helpers.cli import headprune, invoke
from headprune.errors import UnsupportedModelError
from headprune.exporter import export, verify_record
from headprune.loading.models import load_model
from helpers import choice_task, save_folder, tiny_config

EXTRA_HEADS = ("topic", "toxicity", "language")  # three classifier heads beside the masked-LM head


def _tensors(folder) -> dict[str, torch.Tensor]:  # noqa: ANN001
    """Every tensor of a checkpoint folder's safetensors files, else of its ``pytorch_model*.bin`` files."""
    out = {}
    for path in folder.glob("*.safetensors"):
        with safe_open(path, framework="pt") as handle:
            out.update({name: handle.get_tensor(name) for name in handle.keys()})
    for path in [] if out else folder.glob("pytorch_model*.bin"):
        out.update(torch.load(path, weights_only=True))
    return out


def _save_weights(state: dict[str, torch.Tensor], folder, storage: str) -> None:  # noqa: ANN001
    """``state`` as ``model.safetensors``, one ``pytorch_model.bin``, or two ``.bin`` shards and their index."""
    if storage == "safetensors":
        save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    elif storage == "bin":
        torch.save(state, folder / "pytorch_model.bin")
    else:  # the extra heads in the second shard, as a fine-tune adds them
        names = sorted(state)
        shards = {"pytorch_model-00001-of-00002.bin": [n for n in names if "_classifier." not in n],
                  "pytorch_model-00002-of-00002.bin": [n for n in names if "_classifier." in n]}
        for file, members in shards.items():
            torch.save({name: state[name] for name in members}, folder / file)
        index = {"metadata": {}, "weight_map": {name: file for file, members in shards.items() for name in members}}
        (folder / "pytorch_model.bin.index.json").write_text(json.dumps(index))


def _with_heads_of_its_own(folder, state: dict, weights: str, architecture: str):  # noqa: ANN001, ANN202
    """``folder`` saved again with ``state`` plus three classifier heads of its own, as ``weights`` (safetensors or
    pickles), under the class name ``architecture`` (one transformers lacks)."""
    for i, name in enumerate(EXTRA_HEADS):
        state[f"{name}_classifier.weight"] = torch.randn(2 + i, 32)
        state[f"{name}_classifier.bias"] = torch.randn(2 + i)
    (folder / "model.safetensors").unlink()
    _save_weights(state, folder, weights)
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = [architecture]
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture(params=["safetensors", "bin", "bin-shards"])
def multi_head_bert(request, tmp_path, tokenizer):  # noqa: ANN001, ANN201
    """A BERT masked-LM saved with three extra classifier heads, under a class name transformers lacks, its weights
    as safetensors or as PyTorch pickles."""
    torch.manual_seed(11)
    model = transformers.BertForMaskedLM(tiny_config("bert", len(tokenizer)))
    folder = tmp_path / "multi-head-bert"
    save_folder(model, tokenizer, folder)
    return _with_heads_of_its_own(folder, _tensors(folder), request.param, "BertForMaskedLMWithClassifiers")


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
    assert not list(out.glob("*.bin"))  # the export is safetensors, whatever the checkpoint was
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


def _unsafe_bin(folder, architecture: str, protocol: int = 2) -> None:  # noqa: ANN001
    """Give ``folder`` a ``pytorch_model.bin`` whose unpickling would call a function (here a harmless one that
    leaves a mark): what ``torch.load(weights_only=True)`` refuses. Written in pickle ``protocol`` (torch's own is
    2; with another, torch warns in two lines before it refuses)."""
    import builtins  # noqa: F401 - what the pickle names

    class Marks:
        def __reduce__(self):  # noqa: ANN204
            return (exec, (f"open({str(folder / 'ran')!r}, 'w').close()",))

    state = _tensors(folder)
    for path in [*folder.glob("*.safetensors"), *folder.glob("pytorch_model*")]:
        path.unlink()
    torch.save({**state, "marks": Marks()}, folder / "pytorch_model.bin", pickle_protocol=protocol)
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = [architecture]
    (folder / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize("multi_head_bert", ["bin"], indirect=True)
@pytest.mark.parametrize("architecture", ["BertForMaskedLMWithClassifiers", "BertForMaskedLM"])
def test_a_bin_that_needs_code_to_load_is_refused_and_never_run(multi_head_bert, tmp_path, architecture) -> None:
    """Whoever reads the pickle (headprune matching an unknown class, or transformers loading a known one), the
    refusal is one line and exit 2, nothing is written, and the pickle's code has not run."""
    _unsafe_bin(multi_head_bert, architecture)
    result = invoke("export", str(multi_head_bert), "--heads", "L1.H0", "--out", str(tmp_path / "never"))
    assert result.exit_code == 2, result.output
    assert "weights_only=True) refuses it (Unsupported global" in result.output
    assert "never runs code from a weights file" in result.output and len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "never").exists() and not (multi_head_bert / "ran").exists()


@pytest.fixture(params=["safetensors", "bin"])
def pretraining_bert(request, tmp_path, tokenizer):  # noqa: ANN001, ANN201
    """A sound BERT checkpoint of a class of its own: the encoder, the pooler, the masked-LM head and three
    classifier heads, and no next-sentence head (BertForPreTraining's, which it never had)."""
    torch.manual_seed(12)
    model = transformers.BertForPreTraining(tiny_config("bert", len(tokenizer)))
    folder = tmp_path / "pretraining-bert"
    save_folder(model, tokenizer, folder)
    state = {name: tensor for name, tensor in _tensors(folder).items() if not name.startswith("cls.seq_relationship.")}
    return _with_heads_of_its_own(folder, state, request.param, "BertWithTopicHeads")


def test_a_sound_checkpoint_is_stood_in_for_by_a_complete_class_and_exports_whole(pretraining_bert, tmp_path
                                                                                 ) -> None:
    """BertForPreTraining would use its pooler too, but two of its weights (the next-sentence head) are not in
    the checkpoint: BertForMaskedLM, which the checkpoint holds whole, stands in, and the pooler and the three heads
    are carried through bit for bit (refused before: 'would be initialised at random')."""
    original = _tensors(pretraining_bert)
    assert "bert.pooler.dense.weight" in original and not any("seq_relationship" in n for n in original)
    lm = load_model(str(pretraining_bert), device="cpu")
    assert lm.model_class.name == "BertForMaskedLM" and lm.model_class.stands_in_for == "BertWithTopicHeads"
    out = tmp_path / "pruned"
    record = export(str(pretraining_bert), "L0.H1,L1.H3", verify_task=choice_task(), device="cpu", out=out)
    written = _tensors(out)
    assert written.keys() == original.keys()  # every tensor, none made up
    for name, tensor in original.items():
        if ".attention.self." not in name and ".attention.output.dense." not in name:
            assert torch.equal(written[name], tensor), name
    assert {"bert.pooler.dense.weight", "bert.pooler.dense.bias"} <= set(record.passthrough)
    assert len(record.passthrough) == 8 and record.verification.tensors.ok
    verify_record(out)


@pytest.mark.parametrize("multi_head_bert", ["safetensors"], indirect=True)
def test_missing_weights_are_refused_where_no_class_is_complete(multi_head_bert) -> None:
    """A checkpoint that lost a weight of its last layer: every class of the family would make it up, so the best
    of them is named and refused, not loaded with a random tensor."""
    state = _tensors(multi_head_bert)
    del state["bert.encoder.layer.1.output.dense.weight"]
    save_file(state, multi_head_bert / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(UnsupportedModelError, match=r"1 weights of BertForMaskedLM are not in the checkpoint and "
                                                    r"would be initialised at random \(bert.encoder.layer.1.output"):
        load_model(str(multi_head_bert), device="cpu")


@pytest.mark.parametrize("multi_head_bert", ["bin"], indirect=True)
@pytest.mark.parametrize("architecture", ["BertForMaskedLMWithClassifiers", "BertForMaskedLM"])
def test_a_pickle_of_another_protocol_is_refused_in_one_line(multi_head_bert, tmp_path, architecture) -> None:
    """torch warns of a pickle protocol other than its own in two lines on stderr before it refuses the file: the
    protocol goes into headprune's one line instead (a real process: pytest would catch the warning itself)."""
    _unsafe_bin(multi_head_bert, architecture, protocol=4)
    done = headprune("export", str(multi_head_bert), "--heads", "L1.H0", "--out", str(tmp_path / "never"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("headprune: error: "), done.stderr
    assert "pickle protocol 4" in done.stderr and "UserWarning" not in done.stderr
    assert not (tmp_path / "never").exists() and not (multi_head_bert / "ran").exists()
