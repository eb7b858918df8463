"""Checkpoints keep their own task head: loaded with it, every tensor exported, outputs equal the masked
original; and fine-tuned classifiers are a task (``classify``)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch

from headprune.surgery.ablation import ablated
from helpers.cli import invoke
from headprune.errors import TaskError, UnsupportedModelError
from headprune.evaluation import evaluate
from headprune.exporter import export, read_record
from headprune.heads import parse_heads
from headprune.loading.models import load, load_model, wrap_model
from headprune.search.find import find
from headprune.tasks import Example, Task, load_task, write_jsonl_task
from helpers import build_tiny, choice_task, save_folder, tiny_config

IDS = torch.tensor([[5, 9, 14, 3, 27, 8, 11], [0, 0, 0, 7, 19, 4, 2]])
MASK = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1]])

# (family, class, head, auto class): one of each head type headprune must carry through an export.
HEAD_TYPES = [
    ("bert", "BertForMaskedLM", "masked-lm", "AutoModelForMaskedLM"),
    ("bert", "BertForSequenceClassification", "sequence-classification", "AutoModelForSequenceClassification"),
    ("bert", "BertForTokenClassification", "token-classification", "AutoModelForTokenClassification"),
    ("llama", "LlamaForSequenceClassification", "sequence-classification", "AutoModelForSequenceClassification"),
    ("llama", "LlamaForCausalLM", "causal-lm", "AutoModelForCausalLM"),
]


def _save(tmp_path, family: str, class_name: str, tokenizer, seed: int = 0):  # noqa: ANN001, ANN202
    import transformers

    torch.manual_seed(seed)
    config = tiny_config(family, len(tokenizer), num_labels=3)
    model = getattr(transformers, class_name)(config)
    folder = tmp_path / class_name
    save_folder(model, tokenizer, folder)
    return folder


def _outputs(model, encoder: bool) -> dict[str, torch.Tensor]:  # noqa: ANN001
    extra = {} if encoder else {"position_ids": (MASK.cumsum(-1) - 1).clamp(min=0)}
    with torch.no_grad():
        out = model(input_ids=IDS, attention_mask=MASK, output_hidden_states=True, **extra)
    return {"head": out.logits, "hidden": out.hidden_states[-1][MASK.bool()]}


@pytest.mark.parametrize(("family", "class_name", "head", "auto_class"), HEAD_TYPES)
def test_every_tensor_survives_export_and_outputs_equal_the_masked_original(tmp_path, tokenizer, family, class_name,
                                                                          head, auto_class) -> None:
    import transformers

    folder = _save(tmp_path, family, class_name, tokenizer)
    lm = load_model(str(folder), device="cpu")
    assert type(lm.model).__name__ == class_name and lm.task_head == head and lm.unused_tensors == ()
    assert lm.model_class.auto_class == auto_class
    heads = parse_heads("L0.H0,L0.H1,L1.H3")
    with ablated(lm, heads):
        expected = _outputs(lm.model, lm.is_encoder)
    original = lm.model.state_dict()
    task = choice_task() if head in ("causal-lm", "masked-lm", "token-classification") else _classify_task()
    for layout in ("sliced", "dense"):
        out = tmp_path / f"{class_name}-{layout}"
        record = export(lm, heads, layout=layout, verify_task=task, out=out)
        tensors = record.verification.tensors
        assert tensors.ok and tensors.removed == () and tensors.unexpected == ()
        assert set(tensors.kept) | set(tensors.sliced) | set(tensors.edited) == set(original)
        # Sliced: smaller tensors (a grouped-query layer may keep a head zeroed: edited); dense: same shapes.
        assert (len(tensors.sliced) > 0) == (layout == "sliced") and (layout == "sliced" or tensors.edited)
        config = json.loads((out / "config.json").read_text())
        assert config["architectures"] == [class_name]
        assert record.model_class == class_name and record.auto_class == auto_class and record.head == head
        if layout == "sliced":
            assert config["auto_map"] == {auto_class: "modeling_headprune.HeadprunedModel"}
        reloaded = getattr(transformers, auto_class).from_pretrained(out, trust_remote_code=True)
        via_headprune = load(out, device="cpu")
        assert via_headprune.task_head == head
        for model in (reloaded, via_headprune.model):
            got = _outputs(model, lm.is_encoder)
            for name in expected:
                torch.testing.assert_close(got[name], expected[name], atol=1e-5, rtol=1e-5)
        # Same names and values for everything outside the pruned attention.
        saved = via_headprune.model.state_dict()
        for name in tensors.kept:
            assert torch.equal(saved[name], original[name]), name
        assert read_record(out).verification.tensors == tensors


def test_gate_compares_the_heads_own_outputs(tmp_path, tokenizer) -> None:
    lm = load_model(str(_save(tmp_path, "bert", "BertForMaskedLM", tokenizer)), device="cpu")
    record = export(lm, "L1.H2", verify_task=choice_task(), out=tmp_path / "mlm")
    assert "logits" in record.verification.logits.outputs


def test_missing_architectures_says_which_class_and_what_was_left_out(tmp_path, tokenizer, caplog) -> None:
    folder = _save(tmp_path, "bert", "BertForMaskedLM", tokenizer)
    config = json.loads((folder / "config.json").read_text())
    del config["architectures"]
    (folder / "config.json").write_text(json.dumps(config))
    with caplog.at_level(logging.WARNING, logger="headprune"):
        lm = load_model(str(folder), device="cpu")
    assert lm.model_class.name == "BertModel" and not lm.model_class.declared
    assert lm.unused_tensors and all(name.startswith("cls.") for name in lm.unused_tensors)
    assert "names no architecture; loaded as BertModel" in caplog.text and "left out: cls." in caplog.text
    with pytest.raises(UnsupportedModelError, match="an export would lose them"):
        export(lm, "L0.H1", verify_task=choice_task(), out=tmp_path / "never")
    assert not (tmp_path / "never").exists()
    result = invoke("export", str(folder), "--heads", "L0.H1", "--verify-task", "x",
                    "--out", str(tmp_path / "o"), catch_exceptions=True)
    assert result.exit_code == 2 and "left out" in result.output and "would lose" in result.output


def test_remote_code_checkpoints_are_refused_without_permission(tmp_path, tokenizer) -> None:
    folder = _save(tmp_path, "llama", "LlamaForCausalLM", tokenizer)
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["FancyForCausalLM"]
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_fancy.FancyForCausalLM"}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="trust_remote_code"):
        load_model(str(folder), device="cpu")
    result = invoke("eval", str(folder), "--task", "sentiment:n=2", catch_exceptions=True)
    assert result.exit_code == 2 and "--trust-remote-code" in result.output and "Traceback" not in result.output


# ------------------------------------------------------------------ the classify task kind


def _classify_task(pairs: bool = False) -> Task:
    words = "the film is a dull delight movie with nothing to say".split()
    examples = []
    for i in range(24):
        text = " ".join(words[(i + k) % len(words)] for k in range(2 + i % 5))
        examples.append(Example(f"k{i}", text=text, text_pair=words[i % 7] if pairs else "", label=i % 3))
    return Task("tiny-classify", "classify", tuple(examples))


@pytest.mark.parametrize(("family", "class_name"), [("bert", "BertForSequenceClassification"),
                                                    ("llama", "LlamaForSequenceClassification")])
@pytest.mark.parametrize("pairs", [False, True])
def test_classify_scores_by_the_models_own_head(tmp_path, tokenizer, family, class_name, pairs) -> None:
    lm = load_model(str(_save(tmp_path, family, class_name, tokenizer, seed=3)), device="cpu")
    task = _classify_task(pairs)
    result = evaluate(lm, task, batch_size=5)
    single = evaluate(lm, task, batch_size=1)
    np.testing.assert_allclose(result.margins, single.margins, atol=1e-5)
    for example, got in zip(task.examples, result.results):
        encoded = lm.tokenizer(example.text, example.text_pair or None, return_tensors="pt")
        with torch.no_grad():
            logits = lm.model(**encoded).logits[0].double()
        others = torch.cat([logits[: example.label], logits[example.label + 1:]])
        assert got.correct == (int(logits.argmax()) == example.label)
        assert got.margin == pytest.approx(float(logits[example.label] - others.max()), abs=1e-4)


@pytest.mark.parametrize(("family", "class_name"), [("bert", "BertForSequenceClassification"),
                                                    ("llama", "LlamaForSequenceClassification")])
def test_onnx_export_of_a_classifier_is_measured_on_a_classify_task_in_onnxruntime(tmp_path, tokenizer, family,
                                                                                  class_name) -> None:
    """The classify scorer reads the model's labels from the exported graph's config (it crashed on the ONNX
    runner), and the graph's logits, run here in onnxruntime, are the masked original's."""
    from helpers.extras import needs

    needs("onnx", "onnxruntime", "onnxscript", extra="onnx")
    import onnxruntime

    lm = load_model(str(_save(tmp_path, family, class_name, tokenizer, seed=3)), device="cpu")
    heads = parse_heads("L0.H1,L1.H0")
    record = export(lm, heads, format="onnx", verify_task=_classify_task(), out=tmp_path / "o")
    assert record.verification.task.measured_on == "onnxruntime" and record.verification.task.disagreements == 0
    session = onnxruntime.InferenceSession(str(tmp_path / "o" / "model.onnx"))
    names = {i.name for i in session.get_inputs()}
    feeds = {"input_ids": IDS.numpy(), "attention_mask": MASK.numpy()}
    if "position_ids" in names:
        feeds["position_ids"] = (MASK.cumsum(-1) - 1).clamp(min=0).numpy()
    got = torch.from_numpy(session.run(["logits"], feeds)[0])
    with ablated(lm, heads), torch.no_grad():
        want = lm.model(input_ids=IDS, attention_mask=MASK, **({"position_ids": torch.from_numpy(
            feeds["position_ids"])} if "position_ids" in feeds else {})).logits
    assert got.shape == (2, 3)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_classify_labels_by_name_and_clear_errors(tmp_path, tokenizer) -> None:
    folder = _save(tmp_path, "bert", "BertForSequenceClassification", tokenizer)
    config = json.loads((folder / "config.json").read_text())
    config["id2label"] = {"0": "negative", "1": "neutral", "2": "positive"}
    config["label2id"] = {"negative": 0, "neutral": 1, "positive": 2}
    (folder / "config.json").write_text(json.dumps(config))
    lm = load_model(str(folder), device="cpu")
    by_name = Task("named", "classify", tuple(Example(f"n{i}", text="the film is", label=name)
                                                for i, name in enumerate(["negative", "neutral", "positive"])))
    by_index = Task("indexed", "classify", tuple(Example(f"n{i}", text="the film is", label=i) for i in range(3)))
    assert [r.correct for r in evaluate(lm, by_name).results] == [r.correct for r in evaluate(lm, by_index).results]
    with pytest.raises(TaskError, match="'positiv' is not one of the model's labels \\(negative, neutral, positive\\)"):
        evaluate(lm, Task("typo", "classify", (Example("t", text="x", label="positiv"),)))
    with pytest.raises(TaskError, match="label 7 is out of range"):
        evaluate(lm, Task("range", "classify", (Example("t", text="x", label=7),)))
    with pytest.raises(TaskError, match="sequence-classification head"):
        evaluate(build_tiny("llama", tokenizer), by_index)


def test_classify_jsonl_rows(tmp_path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "a b", "label": "positive"}\n{"text": "c", "text_pair": "d", "label": 1}\n')
    task = load_task(path)
    assert task.kind == "classify" and task.examples[1].text_pair == "d" and task.examples[0].label == "positive"
    write_jsonl_task(task, tmp_path / "again.jsonl")
    assert load_task(tmp_path / "again.jsonl").examples == task.examples
    path.write_text('{"text": "a b", "label": true}\n')
    with pytest.raises(TaskError, match="class index"):
        load_task(path)


def test_find_and_attribution_run_on_a_classifier(tmp_path, tokenizer) -> None:
    lm = load_model(str(_save(tmp_path, "bert", "BertForSequenceClassification", tokenizer, seed=5)), device="cpu")
    base = _classify_task().examples
    task = Task("k", "classify", base + tuple(Example(f"x{i}", text=e.text + " so", label=(e.label + 1) % 3)
                                              for i, e in enumerate(base)))
    for screen in ("exact", "attribution"):
        result = find(lm, task, discovery=20, heldout=20, nominees=2, max_heads=2, finalists=2, screen=screen,
                      candidates=3 if screen != "exact" else None)
        assert result.task.kind == "classify" and len(result.finalists) == 2
    record = export(lm, result, verify_task=task, allow_unconfirmed=True, out=tmp_path / "k")
    assert record.head == "sequence-classification" and record.verification.task.disagreements == 0


def test_wrapped_models_know_their_head(tokenizer) -> None:
    import transformers

    model = transformers.BertForSequenceClassification(tiny_config("bert", len(tokenizer), num_labels=2))
    lm = wrap_model(model, tokenizer)
    assert lm.task_head == "sequence-classification" and lm.model_class.auto_class == "AutoModelForSequenceClassification"
