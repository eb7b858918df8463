"""The export's logit check on inputs that share a prompt prefix (``headprune.exporter.verify.check_logits``):
compared once for the prefix and per row after it, on each model's own keys and values, it must find what
comparing every whole sequence finds (the same largest difference, over the same tokens), wherever the
artifact differs: in a token only the shared prefix holds, or one only the rows after it hold."""

from __future__ import annotations

import copy

import pytest
import torch

from headprune.evaluation import Evaluator
from headprune.exporter.verify import check_logits
from headprune.tasks import Example, Task
from helpers import PROMPTS, SHOTS


@pytest.mark.parametrize("where", ["prefix", "after"])
def test_the_check_on_a_shared_prefix_finds_what_whole_sequences_find(tiny_causal, where: str) -> None:
    lm = tiny_causal
    task = Task("shots", "generate", tuple(Example(f"g{i}", prompt=SHOTS + p, target=" positive")
                                           for i, p in enumerate(PROMPTS)), max_new_tokens=4)
    prefix = Evaluator(lm, task).prefix
    assert prefix
    shared = set(prefix.tokens)
    after = {t for e in task.examples for t in lm.tokenizer(e.prompt + e.target)["input_ids"][len(prefix):]}
    token = min(shared - after) if where == "prefix" else min(after - shared)
    artifact = copy.deepcopy(lm.model)
    with torch.no_grad():  # the artifact differs where that token is (not by a constant: a LayerNorm removes it)
        row = artifact.get_input_embeddings().weight[token]
        row += torch.randn(row.shape, generator=torch.Generator().manual_seed(0))
    options = dict(mode="zero", means=None, tolerance=1e-5)
    once = check_logits(lm, (), artifact, task, **options)
    whole = check_logits(lm, (), lambda **inputs: artifact(**inputs), task, **options)  # not a module: no prefix
    assert once.max_abs_diff > 1e-3
    assert once.max_abs_diff == pytest.approx(whole.max_abs_diff, rel=1e-4)
    assert once.max_abs_logit == pytest.approx(whole.max_abs_logit, rel=1e-4)
    assert (once.tokens, once.outputs, once.examples) == (whole.tokens, whole.outputs, whole.examples)
