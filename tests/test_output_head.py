"""The output head applied once per condition (``headprune.evaluation.output_head``) gives each batch's own logits.

The reference is the model's plain forward pass, one example at a time, log-softmax by hand: never the evaluator.
Every causal family, Gemma 2's soft-capped logits among them (the cap is applied to the deferred rows by the
model's own pass), with a head zeroed and the layer cache on.
"""

from __future__ import annotations

import numpy as np
import torch

from headprune.evaluation import Evaluator
from headprune.heads import Head
from headprune.surgery.ablation import ablated
from headprune.tasks import Example, Task
from helpers import PROMPTS


def _task() -> Task:
    return Task("one-token", "choice", tuple(
        Example(f"c{i}", prompt=p, choices=(" positive", " negative"), answer=i % 2) for i, p in enumerate(PROMPTS)))


def _margins_by_hand(lm, task: Task, heads: tuple[Head, ...]) -> list[float]:  # noqa: ANN001
    """Per example, the log-prob of the right choice minus the wrong one's (one token each), one prompt at a time."""
    tok, margins = lm.tokenizer, []
    with torch.inference_mode(), ablated(lm, heads):
        for example in task.examples:
            scores = []
            for choice in example.choices:
                prompt = tok(example.prompt)["input_ids"]
                full = tok(example.prompt + choice)["input_ids"]
                ids = torch.tensor([full])
                logprobs = torch.log_softmax(lm.model(input_ids=ids).logits[0].float(), -1)
                scores.append(sum(float(logprobs[k - 1, full[k]]) for k in range(len(prompt), len(full))))
            margins.append(scores[example.answer] - scores[1 - example.answer])
    return margins


def test_the_head_runs_once_per_condition_and_gives_the_plain_logits(tiny_causal) -> None:
    lm = tiny_causal
    task = _task()
    if lm.name == "tiny-gemma2":
        assert lm.model.config.final_logit_softcapping  # the cap must be applied to the deferred rows too
    evaluator = Evaluator(lm, task, batch_size=3, reuse_layers=True)
    assert len(evaluator._batches) > 1 and evaluator.output_head.head is not None
    calls = []
    handle = evaluator.output_head.head.register_forward_hook(lambda *args: calls.append(1))
    try:
        for heads in [(), (Head(1, 0),)]:
            calls.clear()
            result = evaluator.run(heads)
            assert calls == [1]  # one product for every batch's rows, not one per batch
            np.testing.assert_allclose(result.margins, _margins_by_hand(lm, task, heads), rtol=0, atol=1e-4)
    finally:
        handle.remove()
