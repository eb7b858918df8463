"""DeBERTa-v2/v3 and ModernBERT beyond the coverage matrix (tests/test_families.py): their sequence classifiers on a
classify task, the layer cache and the first-position cut against full passes, the variants whose per-head rows lie
elsewhere (DeBERTa-v2's own position projections, ModernBERT's biases), a sliced export pruned again, and the formats
a runtime runs (ONNX) or refuses in one line (GGUF). Every comparison is against the masked original's numbers.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import choice_task, save_folder
from helpers.cli import invoke

from headprune.evaluation import Evaluator
from headprune.evaluation.first_position import reads_first_position
from headprune.exporter import export, read_record
from headprune.errors import UnsupportedModelError
from headprune.heads import parse_heads
from headprune.loading.adapters import adapter_for
from headprune.loading.adapters.base import get_path
from headprune.loading.models import load, load_model, wrap_model
from headprune.search.find import find
from headprune.surgery.ablation import ablated
from headprune.surgery.remote_modeling import head_projection
from headprune.tasks import Example, Task
from headprune.testing import family_model

HEADS = "L0.H1,L1.H0,L1.H1"
IDS = torch.tensor([[5, 9, 14, 3, 27, 8, 11], [0, 0, 0, 7, 19, 4, 2]])  # right-padded rows, as encoders take them
MASK = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]])
WORDS = "the film is a dull delight movie with nothing to say about".split()
CLASSIFY = Task("tiny-classify", "classify", tuple(
    Example(f"k{i}", text=" ".join(WORDS[(i + k) % len(WORDS)] for k in range(2 + i % 7)), label=i % 3)
    for i in range(24)))
# (model type, class, config changes): the classifiers as shipped (ModernBERT pools the first position or the mean)
CLASSIFIERS = [("deberta-v2", "DebertaV2ForSequenceClassification", {}),
               ("modernbert", "ModernBertForSequenceClassification", {"classifier_pooling": "cls"}),
               ("modernbert", "ModernBertForSequenceClassification", {"classifier_pooling": "mean"})]
FIRST_POSITION = {"DebertaV2ForSequenceClassification"}  # ModernBERT's output projection sits inside its attention


def _outputs(model) -> torch.Tensor:  # noqa: ANN001
    """The logits of a head (the classifier's, the masked LM's at real tokens) or the last hidden states."""
    with torch.no_grad():
        out = model(input_ids=IDS, attention_mask=MASK)
    if getattr(out, "logits", None) is None:
        return out.last_hidden_state[MASK.bool()]
    return out.logits if out.logits.dim() == 2 else out.logits[MASK.bool()]


def _full_pass_margins(lm, heads) -> np.ndarray:  # noqa: ANN001
    """Each classify example's margin from the model's own full forward pass, one example at a time."""
    margins = []
    with ablated(lm, heads), torch.no_grad():
        for example in CLASSIFY.examples:
            logits = lm.model(**lm.tokenizer(example.text, return_tensors="pt")).logits[0].double()
            others = torch.cat([logits[: example.label], logits[example.label + 1:]])
            margins.append(float(logits[example.label] - others.max()))
    return np.array(margins)


@pytest.mark.parametrize(("model_type", "class_name", "changes"), CLASSIFIERS)
def test_classifier_margins_equal_full_passes_under_every_ablation(model_type, class_name, changes, tokenizer) -> None:
    """Four layers, so the layer cache skips some; DeBERTa's classifier also runs its last layer at [CLS] alone."""
    model = family_model(model_type, len(tokenizer), seed=5, model_class=class_name, num_labels=3,
                         num_hidden_layers=4, **changes)
    lm = wrap_model(model, tokenizer, name=f"tiny-{model_type}")
    assert lm.task_head == "sequence-classification"
    assert reads_first_position(lm) == (class_name in FIRST_POSITION)
    evaluator = Evaluator(lm, CLASSIFY, batch_size=7, reuse_layers=True)
    assert evaluator._layer_cache.checkpoints == [1, 2, 3]
    for spec in ("", "L3.H2", "L0.H3", "L1.H0,L2.H2", "L2.H1,L3.H0"):
        heads = parse_heads(spec) if spec else ()
        got = np.array(evaluator.run(heads).margins)
        np.testing.assert_allclose(got, _full_pass_margins(lm, heads), atol=1e-5, err_msg=spec)


@pytest.mark.parametrize("model_type", ["deberta-v2", "modernbert"])
def test_embedding_scores_from_cached_layers_equal_full_passes(model_type, tokenizer) -> None:
    """A choice task scored by embedding similarity: runs started at a cached layer (layers below it stood in for,
    DeBERTa's returning a pair, ModernBERT's read for their mask type) give the full passes' margins."""
    lm = wrap_model(family_model(model_type, len(tokenizer), seed=7, num_hidden_layers=4), tokenizer)
    plain = Evaluator(lm, choice_task(), batch_size=5)
    cached = Evaluator(lm, choice_task(), batch_size=5, reuse_layers=True)
    assert cached._layer_cache.checkpoints == [1, 2, 3]
    intact = plain.run()
    np.testing.assert_allclose(cached.run().margins, intact.margins, rtol=0, atol=1e-6)
    for spec in ("L1.H0", "L3.H2", "L2.H0,L3.H3"):
        heads = parse_heads(spec)
        want = plain.run(heads).margins
        assert (np.array(want) != np.array(intact.margins)).any()
        np.testing.assert_allclose(cached.run(heads).margins, want, rtol=0, atol=1e-5, err_msg=spec)


@pytest.mark.parametrize(("model_type", "class_name", "changes"), CLASSIFIERS)
def test_classifier_exports_give_the_masked_originals_logits(model_type, class_name, changes, tokenizer,
                                                             tmp_path) -> None:
    import transformers

    model = family_model(model_type, len(tokenizer), seed=3, model_class=class_name, num_labels=3, **changes)
    lm = load_model(str(save_folder(model, tokenizer, tmp_path / "m")), device="cpu")
    heads = parse_heads(HEADS)
    with ablated(lm, heads):
        want = _outputs(lm.model)
    assert float((want - _outputs(lm.model)).abs().max()) > 1e-6  # the heads matter
    for layout in ("sliced", "dense"):
        record = export(lm, heads, layout=layout, verify_task=CLASSIFY, out=tmp_path / layout)
        assert record.head == "sequence-classification" and record.verification.task.disagreements == 0
        stock = transformers.AutoModelForSequenceClassification.from_pretrained(
            tmp_path / layout, trust_remote_code=layout == "sliced")
        assert type(stock).__name__ == class_name
        for loaded in (load(tmp_path / layout, device="cpu").model, stock):
            torch.testing.assert_close(_outputs(loaded), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("model_type", "class_name", "changes"), CLASSIFIERS)
def test_find_runs_on_a_classifier_and_its_result_exports(model_type, class_name, changes, tokenizer,
                                                          tmp_path) -> None:
    model = family_model(model_type, len(tokenizer), seed=5, model_class=class_name, num_labels=3, **changes)
    lm = wrap_model(model, tokenizer, name=f"tiny-{model_type}")
    task = Task("k", "classify", CLASSIFY.examples + tuple(
        Example(f"x{i}", text=e.text + " so", label=(e.label + 1) % 3) for i, e in enumerate(CLASSIFY.examples)))
    for screen in ("exact", "attribution"):
        result = find(lm, task, discovery=24, heldout=24, nominees=2, max_heads=2, finalists=2, screen=screen,
                      candidates=3 if screen != "exact" else None)
        assert result.task.kind == "classify" and len(result.finalists) == 2
    record = export(lm, result, verify_task=task, allow_unconfirmed=True, out=tmp_path / "k")
    assert record.head == "sequence-classification" and record.verification.task.disagreements == 0


# Variants whose heads' rows lie elsewhere: DeBERTa-v2's own position projections (both, or content-to-position
# only: no pos_query_proj), its convolution after the first layer and absolute positions; ModernBERT's biases.
POSITION_KEYS, POSITION_QUERIES = "attention.self.pos_key_proj", "attention.self.pos_query_proj"
VARIANTS = [
    ("deberta-v2", dict(share_att_key=False, conv_kernel_size=3, position_biased_input=True, type_vocab_size=2),
     (POSITION_KEYS, POSITION_QUERIES)),
    ("deberta-v2", dict(share_att_key=False, pos_att_type=["c2p"], position_buckets=-1), (POSITION_KEYS,)),
    ("modernbert", dict(attention_bias=True), ()),
]


@pytest.mark.parametrize(("model_type", "changes", "projections"), VARIANTS)
def test_variants_slice_every_per_head_row(model_type, changes, projections, tokenizer, tmp_path) -> None:
    import transformers

    lm = wrap_model(family_model(model_type, len(tokenizer), seed=4, **changes), tokenizer, name=f"tiny-{model_type}")
    first = lm.adapter.layers(lm.model)[0]
    assert tuple(p for p, _ in lm.adapter.head_projections if head_projection(first, p) is not None) == projections
    with torch.no_grad():  # distinct biases, so a wrong row is seen
        for name, parameter in lm.model.named_parameters():
            if name.endswith("bias") and (".attn." in name or ".attention.self." in name):
                parameter.copy_(torch.randn_like(parameter))
    heads = parse_heads(HEADS)
    with ablated(lm, heads):
        want = _outputs(lm.model)
    record = export(lm, heads, layout="sliced", verify_task=choice_task(), out=tmp_path / "s")
    assert record.verification.task.disagreements == 0 and record.parameters.after < record.parameters.before
    stock = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "s", trust_remote_code=True)
    torch.testing.assert_close(_outputs(stock), want, atol=1e-5, rtol=1e-5)
    hd = lm.grid.head_dim
    for plan in record.layers:
        original, sliced = lm.adapter.layers(lm.model)[plan.layer], lm.adapter.layers(stock)[plan.layer]
        for path in projections:  # each kept head's rows, in order (one key/value head a query head)
            for tensor in ("weight", "bias"):
                full = getattr(get_path(original, path), tensor)
                rows = torch.cat([full[h * hd:(h + 1) * hd] for h in plan.q_heads])
                assert torch.equal(getattr(get_path(sliced, path), tensor), rows)
        assert get_path(sliced, lm.adapter.output_projection_path).in_features == len(plan.q_heads) * hd


@pytest.mark.parametrize("model_type", ["deberta-v2", "modernbert"])
def test_a_sliced_export_pruned_again_is_the_model_pruned_once(model_type, tokenizer, tmp_path) -> None:
    own_projections = {"share_att_key": False} if model_type == "deberta-v2" else {}  # DeBERTa-v2's: sliced too
    model = save_folder(family_model(model_type, len(tokenizer), seed=3, **own_projections), tokenizer,
                        tmp_path / "model")
    assert invoke("export", str(model), "--heads", "L0.H1", "--out", str(tmp_path / "first")).exit_code == 0
    again = invoke("export", str(tmp_path / "first"), "--heads", "L0.H0,L1.H2", "--out", str(tmp_path / "again"))
    assert again.exit_code == 0, again.output
    once = invoke("export", str(model), "--heads", "L0.H0,L0.H1,L1.H2", "--out", str(tmp_path / "once"))
    assert once.exit_code == 0, once.output
    assert read_record(tmp_path / "again").layers == read_record(tmp_path / "once").layers
    a, b = load(tmp_path / "again", device="cpu"), load(tmp_path / "once", device="cpu")
    torch.testing.assert_close(_outputs(a.model), _outputs(b.model), rtol=0, atol=1e-5)


def test_a_deberta_head_size_headprune_does_not_read_is_refused(tokenizer, tmp_path) -> None:
    import transformers

    config = transformers.DebertaV2Config(hidden_size=64, num_attention_heads=4, attention_head_size=8)
    with pytest.raises(UnsupportedModelError, match="attention_head_size is set"):
        adapter_for(config).check_config(config)


@pytest.mark.parametrize("model_type", ["deberta-v2", "modernbert"])
def test_gguf_is_refused_in_one_line_naming_the_formats_that_work(model_type, tokenizer, tmp_path) -> None:
    folder = save_folder(family_model(model_type, len(tokenizer)), tokenizer, tmp_path / "m")
    result = invoke("export", str(folder), "--heads", HEADS, "--format", "gguf", "--out", str(tmp_path / "g"))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "safetensors, onnx" in lines[0], result.output
    assert model_type in lines[0] and not (tmp_path / "g").exists()


@pytest.mark.slow  # dynamo's export takes about 10 s a model on one core
@pytest.mark.parametrize(("model_type", "class_name"), [
    ("deberta-v2", None), ("modernbert", None), ("deberta-v2", "DebertaV2ForSequenceClassification"),
    ("modernbert", "ModernBertForSequenceClassification")])
def test_onnx_runs_in_onnxruntime_as_the_masked_original(model_type, class_name, tokenizer, tmp_path) -> None:
    """As BERT: the bare encoder's hidden states, or a classifier's logits on a classify task."""
    from helpers.extras import needs

    needs("onnx", "onnxruntime", "onnxscript", extra="onnx")
    import onnxruntime

    model = family_model(model_type, len(tokenizer), seed=2, model_class=class_name, num_labels=3)
    lm = wrap_model(model if class_name else model.base_model, tokenizer, name=f"tiny-{model_type}")
    heads = parse_heads(HEADS)
    task = CLASSIFY if class_name else choice_task()
    record = export(lm, heads, format="onnx", verify_task=task, out=tmp_path / "o")
    assert record.verification.task.measured_on == "onnxruntime" and record.verification.task.disagreements == 0
    session = onnxruntime.InferenceSession(str(tmp_path / "o" / "model.onnx"))
    got = torch.from_numpy(np.asarray(session.run(None, {"input_ids": IDS.numpy(), "attention_mask": MASK.numpy()})[0]))
    with ablated(lm, heads):
        want = _outputs(lm.model)
    torch.testing.assert_close(got if class_name else got[MASK.bool()], want, atol=1e-4, rtol=1e-4)


@pytest.mark.slow  # dynamo's export takes about 10 s a model on one core
@pytest.mark.parametrize("model_type", ["bert", "deberta-v2", "modernbert"])
def test_a_masked_lm_onnx_export_verified_on_a_choice_task(model_type, tokenizer, tmp_path) -> None:
    """A masked-LM encoder's graph gives logits, and a choice task scores an encoder's hidden states: the task is
    measured on the torch model the graph was exported from (the record says so), and the graph's logits are still
    checked against the masked original's. Before, the export stopped with an AttributeError (exit 3)."""
    from helpers.extras import needs

    needs("onnx", "onnxruntime", "onnxscript", extra="onnx")
    import onnxruntime

    lm = wrap_model(family_model(model_type, len(tokenizer), seed=2), tokenizer, name=f"tiny-{model_type}")
    heads = parse_heads(HEADS)
    record = export(lm, heads, format="onnx", verify_task=choice_task(), out=tmp_path / "o")
    task = record.verification.task
    assert task.measured_on.startswith("the torch model the ONNX graph was exported from") and task.disagreements == 0
    session = onnxruntime.InferenceSession(str(tmp_path / "o" / "model.onnx"))
    got = torch.from_numpy(np.asarray(session.run(None, {"input_ids": IDS.numpy(), "attention_mask": MASK.numpy()})[0]))
    with ablated(lm, heads):
        want = _outputs(lm.model)
    torch.testing.assert_close(got[MASK.bool()], want, atol=1e-4, rtol=1e-4)
