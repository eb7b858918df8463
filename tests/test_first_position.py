"""A sequence classifier reading the first position runs its last layer there alone after attention
(``headprune.evaluation.first_position``): the same margins as a full pass, with every ablation and the layer cache,
on a fraction of that layer's rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headprune.evaluation import Evaluator
from headprune.evaluation.first_position import last_layer_at_first_position, reads_first_position
from headprune.heads import Head
from headprune.loading.models import load_model
from headprune.surgery.ablation import ablated
from headprune.tasks import Example, Task
from headprune.testing import tiny_config
from helpers import save_folder

WORDS = "the film is a dull delight movie with nothing to say about".split()
TASK = Task("tiny-classify", "classify", tuple(
    Example(f"k{i}", text=" ".join(WORDS[(i + k) % len(WORDS)] for k in range(2 + i % 7)), label=i % 3)
    for i in range(30)))
CONDITIONS = [(), (Head(2, 1),), (Head(0, 3),), (Head(1, 0), Head(2, 2))]


def _classifier(tmp_path, tokenizer, class_name: str):  # noqa: ANN001, ANN202
    import transformers

    torch.manual_seed(5)
    if class_name.startswith("Roberta"):  # positions start after the padding index
        config = transformers.RobertaConfig(hidden_size=32, intermediate_size=64, num_attention_heads=4,
                                            num_hidden_layers=3, vocab_size=len(tokenizer), pad_token_id=0,
                                            max_position_embeddings=258, num_labels=3)
    else:
        config = tiny_config("bert", len(tokenizer), layers=3, num_labels=3)
    model = getattr(transformers, class_name)(config)
    return load_model(str(save_folder(model, tokenizer, tmp_path / class_name)), device="cpu")


def _full_pass_margins(lm, heads) -> np.ndarray:  # noqa: ANN001
    """Each example's margin from the model's own full forward pass, one example at a time."""
    margins = []
    with ablated(lm, heads), torch.no_grad():
        for example in TASK.examples:
            logits = lm.model(**lm.tokenizer(example.text, return_tensors="pt")).logits[0].double()
            others = torch.cat([logits[: example.label], logits[example.label + 1:]])
            margins.append(float(logits[example.label] - others.max()))
    return np.array(margins)


@pytest.mark.parametrize("class_name", ["BertForSequenceClassification", "RobertaForSequenceClassification"])
def test_margins_equal_a_full_pass_under_every_ablation(tmp_path, tokenizer, class_name) -> None:
    lm = _classifier(tmp_path, tokenizer, class_name)
    assert reads_first_position(lm)
    evaluator = Evaluator(lm, TASK, batch_size=7, reuse_layers=True)
    for heads in CONDITIONS:
        got = np.array(evaluator.run(heads).margins)
        np.testing.assert_allclose(got, _full_pass_margins(lm, heads), atol=1e-5, err_msg=str(heads))


def test_the_last_layer_runs_after_attention_at_one_position_per_sequence(tmp_path, tokenizer) -> None:
    lm = _classifier(tmp_path, tokenizer, "BertForSequenceClassification")
    layers = lm.adapter.layers(lm.model)
    seen: dict[str, list[int]] = {"last": [], "query": []}
    hooks = [layers[-1].intermediate.register_forward_hook(lambda m, a, o: seen["last"].append(a[0].shape[:2])),
             layers[-1].attention.self.query.register_forward_hook(lambda m, a, o: seen["query"].append(a[0].shape[:2]))]
    ids = lm.tokenizer(["the film is a dull delight", "nothing to say"], return_tensors="pt", padding=True)
    try:
        with torch.no_grad(), last_layer_at_first_position(lm):
            lm.model(**ids)
    finally:
        for hook in hooks:
            hook.remove()
    assert seen["last"] == [torch.Size([2, 1])]  # the feed-forward block: the first position of each row
    assert seen["query"] == [ids["input_ids"].shape]  # the attention itself: every position


def test_other_heads_and_lookalike_classes_keep_every_position(tmp_path, tokenizer) -> None:
    tokens = _classifier(tmp_path, tokenizer, "BertForTokenClassification")  # reads every position
    assert not reads_first_position(tokens)
    lookalike = _classifier(tmp_path, tokenizer, "BertForSequenceClassification")
    lookalike.model.__class__ = type("BertForSequenceClassification", (type(lookalike.model),),
                                     {"__module__": "my_remote_code"})  # same name, not transformers' class
    assert not reads_first_position(lookalike)
