"""GGUF of bare encoders (BERT, RoBERTa, ModernBERT), which llama.cpp's converter writes as embedding models: each
matrix model loaded as its base model, exported dense with heads removed, run in llama.cpp itself for its embeddings
(every token's last hidden state, and the file's own mean pooling) and compared with the masked original's; a task
verified on an encoder choice task (embedding similarity) is re-measured in llama.cpp. Sliced files, heads llama.cpp's
graphs do not compute (masked-LM, classifiers) and DeBERTa are refused in one line naming what works.

Like test_gguf.py these need llama.cpp (``headprune[gguf]``) and fail without it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import choice_task, save_folder
from helpers.cli import invoke
from helpers.gguf_file import gguf_knows, gguf_metadata, llama_cpp_build

from headprune.errors import UnsupportedModelError, VerificationError
from headprune.exporter import export
from headprune.exporter.formats.gguf import GGUF_TOLERANCE, Gguf
from headprune.exporter.gguf.families import ENCODER_TYPES, FAMILIES
from headprune.exporter.llama_cpp.runtime import LlamaCpp
from headprune.heads import parse_heads
from headprune.loading.models import wrap_model
from headprune.surgery.ablation import ablated
from headprune.testing import family_model, wordpiece_tokenizer

HEADS = "L0.H1,L1.H0"
BASE = {"bert": "BertModel", "roberta": "RobertaModel", "modernbert": "ModernBertModel"}
TEXTS = ["the film is", "a dull and lifeless movie with nothing to say, the film is", "12 + 7 = 19", "it"]


def test_every_gguf_encoder_is_run_in_llama_cpp_by_the_suite() -> None:
    assert set(ENCODER_TYPES) == set(BASE)


def _lm(model_type: str, tokenizer, model_class: str | None = None):  # noqa: ANN001, ANN202
    model = family_model(model_type, len(tokenizer), seed=2, model_class=model_class or BASE[model_type])
    return wrap_model(model, tokenizer, name=f"tiny-{model_type}")


def against_masked(lm, path, texts=TEXTS) -> tuple[float, float, float]:  # noqa: ANN001
    """Largest |llama.cpp's last hidden state of the file - the masked original's| at every token of ``texts``, the
    largest |masked - unmasked| (what removing the heads does, so the comparison can fail), the largest |masked|."""
    diff = effect = scale = 0.0
    llm = LlamaCpp(path, n_ctx=64, embeddings="tokens")
    try:
        for text in texts:
            ids = lm.tokenizer(text)["input_ids"]
            with torch.no_grad():
                whole = lm.model(input_ids=torch.tensor([ids])).last_hidden_state[0]
                with ablated(lm, parse_heads(HEADS)):
                    want = lm.model(input_ids=torch.tensor([ids])).last_hidden_state[0]
            diff = max(diff, float(np.abs(llm.embed(ids) - want.numpy()).max()))
            effect = max(effect, float((want - whole).abs().max()))
            scale = max(scale, float(want.abs().max()))
    finally:
        llm.close()
    return diff, effect, scale


@pytest.mark.parametrize("model_type", sorted(BASE))
def test_encoder_gguf_gives_the_masked_originals_embeddings_in_llama_cpp(model_type, tokenizer, tmp_path) -> None:
    lm = _lm(model_type, tokenizer)
    if _refused_by_an_older_gguf(model_type, lambda: export(lm, HEADS, format="gguf", layout="dense",
                                                            verify_task=choice_task(), out=tmp_path / "g")):
        return
    record = export(lm, HEADS, format="gguf", layout="dense", verify_task=choice_task(), out=tmp_path / "g")
    info = Gguf.details(record)
    assert info.architecture == FAMILIES[model_type].arch and info.pooling == "mean"
    assert info.runtime.done and info.runtime.mismatches == 0 and info.runtime.identical == info.runtime.prompts > 0
    assert info.runtime.tokenizer_agree == info.runtime.tokenizer_texts
    # The task (embedding similarity) re-measured on llama.cpp's hidden states answers as the masked original does.
    task = record.verification.task
    assert task is not None and task.disagreements == 0 and "llama.cpp" in task.measured_on
    assert record.verification.logits.outputs == ("last_hidden_state",)
    assert "llama-embedding -m model.gguf" in (tmp_path / "g" / "README.md").read_text()  # an embedding model's usage
    diff, effect, scale = against_masked(lm, tmp_path / "g" / "model.gguf")
    # GGUF's gate, or BERT's (llama.cpp's float16 GELU table: 7.5e-6 of the largest value measured here)
    tolerance = FAMILIES[model_type].tolerance or GGUF_TOLERANCE
    assert effect > 1e-3 and diff <= tolerance * max(1.0, scale), (diff, effect, scale)
    reader, meta = gguf_metadata(tmp_path / "g" / "model.gguf")
    arch = meta["general.architecture"]
    assert meta[f"{arch}.attention.causal"] is False and meta[f"{arch}.pooling_type"] == 1  # mean
    names = {t.name for t in reader.tensors}
    assert not any(name.startswith("pooler") for name in names)
    if model_type == "roberta":  # positions from pad_token_id + 1, as the converter cuts them
        rows = next(t for t in reader.tensors if t.name == "position_embd.weight").shape[-1]
        assert rows == lm.model.config.max_position_embeddings - 2 == meta["bert.context_length"]


@pytest.mark.parametrize(("model_type", "gguf_type"), [("bert", "q8_0"), ("modernbert", "f16")])
def test_a_lossy_encoder_file_is_gated_on_its_float32_file(model_type, gguf_type, tokenizer, tmp_path) -> None:
    """llama.cpp's graph adds BERT's token-type row in float32 only (an f16 or q8_0 one aborts the process): the
    converter keeps it float32, and so does headprune; the lossy file is gated on the float32 file's hidden states."""
    def run():  # noqa: ANN202
        return export(_lm(model_type, tokenizer), HEADS, format="gguf", layout="dense", verify_task=choice_task(),
                      out=tmp_path / "g", gguf_type=gguf_type)
    if _refused_by_an_older_gguf(model_type, run):
        return
    record = run()
    info = Gguf.details(record)
    assert info.quantized is not None and info.quantized.rms_diff <= info.quantized.allowed
    assert info.typed_runtime is not None and info.typed_runtime.done and not info.typed_runtime.gated
    reader, _ = gguf_metadata(tmp_path / "g" / info.file)
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert types["blk.0.attn_output.weight"] == gguf_type.upper()
    if model_type == "bert":
        assert types["token_types.weight"] == "F32"


def test_bert_wordpiece_tokenizer_is_written_as_llama_cpps_and_a_cased_one_refused(tmp_path) -> None:
    """BERT's (uncased) WordPiece as llama.cpp's ``bert`` vocabulary: llama.cpp tokenizes the task's texts as the
    model's tokenizer does. llama.cpp lowercases every text, so a cased WordPiece is refused in one line."""
    uncased = wordpiece_tokenizer()
    if llama_cpp_build() < 11549:  # the floor's llama.cpp (b11063) splits WordPiece otherwise: the gate refuses it
        with pytest.raises(VerificationError, match="tokenizes .* differently from the model's tokenizer"):
            export(_lm("bert", uncased), HEADS, format="gguf", layout="dense", verify_task=choice_task(),
                   out=tmp_path / "g")
        assert not (tmp_path / "g").exists()
        return
    record = export(_lm("bert", uncased), HEADS, format="gguf", layout="dense", verify_task=choice_task(),
                    out=tmp_path / "g")
    info = Gguf.details(record)
    assert info.tokenizer.startswith("bert (WordPiece") and info.runtime.tokenizer_agree == info.runtime.tokenizer_texts
    llm = LlamaCpp(tmp_path / "g" / "model.gguf", n_ctx=64, embeddings="tokens")
    try:
        for text in ("The Film, IS a delight!", "naïve café 12 + 7"):
            assert llm.tokenize(text) == uncased(text)["input_ids"], text
    finally:
        llm.close()
    save_folder(family_model("bert", 300, seed=2, model_class="BertModel"), wordpiece_tokenizer(lowercase=False),
                tmp_path / "m")
    result = _cli(tmp_path, "--layout", "dense")
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "lowercases every text" in lines[0] and not (tmp_path / "o").exists()


def _refused_by_an_older_gguf(model_type: str, run) -> bool:  # noqa: ANN001
    """Where the installed gguf-py cannot name the family's llama.cpp architecture (its floor, 0.14, lacks
    modern-bert), the export is refused in one line and nothing is written: checked here, True; else False."""
    if gguf_knows(FAMILIES[model_type].arch):
        return False
    with pytest.raises(UnsupportedModelError, match="does not know llama.cpp's"):
        run()
    return True


def _cli(tmp_path, *options: str):  # noqa: ANN001, ANN202
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"prompt": "the film is", "choices": [" good", " bad"], "answer": 0}) + "\n")
    return invoke("export", str(tmp_path / "m"), "--heads", HEADS, "--format", "gguf", "--verify-task", str(path),
                  "--out", str(tmp_path / "o"), *options)


@pytest.mark.parametrize("model_type", sorted(BASE))
def test_sliced_encoder_gguf_is_refused_naming_dense(model_type, tokenizer, tmp_path) -> None:
    save_folder(_lm(model_type, tokenizer).model, tokenizer, tmp_path / "m")
    result = _cli(tmp_path)  # the default layout: sliced
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "one head count for every layer" in lines[0] and "--layout dense" in lines[0]
    assert "safetensors, onnx" in lines[0] and not (tmp_path / "o").exists()


@pytest.mark.parametrize(("model_type", "model_class", "words"), [
    ("bert", "BertForMaskedLM", "not a masked-lm head"),
    ("roberta", "RobertaForSequenceClassification", "not a sequence-classification head"),
    ("modernbert", "ModernBertForMaskedLM", "not a masked-lm head"),
    ("deberta-v2", "DebertaV2Model", "the bare encoders of bert, modernbert, roberta"),
])
def test_encoder_heads_llama_cpp_does_not_compute_are_refused(model_type, model_class, words, tokenizer,
                                                              tmp_path) -> None:
    """llama.cpp's bert and modern-bert graphs give embeddings: a masked-LM or classifier head is refused in one
    line naming the bare encoder and the formats that take the head; DeBERTa has no llama.cpp architecture."""
    save_folder(family_model(model_type, len(tokenizer), seed=2, model_class=model_class), tokenizer, tmp_path / "m")
    result = _cli(tmp_path, "--layout", "dense")
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert words in lines[0] and "exported as safetensors, onnx" in lines[0] and not (tmp_path / "o").exists()
