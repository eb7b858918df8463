"""The evaluation engine: batch-size independence, and scores that match a by-hand computation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from headprune.evaluation import Evaluator, evaluate
from headprune.heads import parse_heads
from headprune.tasks import Example, Task
from helpers import assert_same_results as _assert_same
from helpers import build_tiny, choice_task, generate_task, prefixed, text_task

@pytest.mark.parametrize("make_task", [choice_task, generate_task, text_task])
def test_results_do_not_depend_on_batch_size(tiny_causal, make_task) -> None:
    task = make_task()
    heads = parse_heads("L0.H1,L1.H0")
    _assert_same(evaluate(tiny_causal, task, batch_size=1), evaluate(tiny_causal, task, batch_size=7))
    _assert_same(evaluate(tiny_causal, task, heads=heads, batch_size=1),
                 evaluate(tiny_causal, task, heads=heads, batch_size=7))


def test_encoder_choice_does_not_depend_on_batch_size(tokenizer) -> None:
    bert = build_tiny("bert", tokenizer)
    task = choice_task()
    _assert_same(evaluate(bert, task, batch_size=1), evaluate(bert, task, batch_size=7))


def _loglik(lm, context: str, continuation: str) -> float:
    """Log-likelihood of ``continuation`` after ``context`` from one unpadded forward pass."""
    tok = lm.tokenizer
    ctx = tok(context.rstrip(" "))["input_ids"]
    whole = tok(context.rstrip(" ") + context[len(context.rstrip(" ")):] + continuation)["input_ids"]
    cont = whole[len(ctx):]
    ids = torch.tensor([ctx + cont])
    with torch.no_grad():
        logprobs = F.log_softmax(lm.model(input_ids=ids).logits[0], -1)
    return float(sum(logprobs[len(ctx) - 1 + t, token] for t, token in enumerate(cont)))


def test_choice_margin_matches_log_likelihood_by_hand(tiny_causal) -> None:
    task = choice_task()
    result = evaluate(tiny_causal, task, batch_size=5)
    for example, got in zip(task.examples, result.results):
        values = np.array([_loglik(tiny_causal, example.prompt, c) for c in example.choices])
        expected = values[example.answer] - np.delete(values, example.answer).max()
        assert got.margin == pytest.approx(expected, abs=1e-4)
        assert got.correct == bool(np.argmax(values) == example.answer)


def _transformers_greedy(lm, prompt: str, max_new_tokens: int) -> str:
    """transformers' own greedy decoding of one prompt, alone (no batch, no padding), up to the first newline."""
    ids = torch.tensor([lm.tokenizer(prompt)["input_ids"]])
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else lm.tokenizer.eos_token_id
    with torch.no_grad():
        out = lm.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                max_new_tokens=max_new_tokens, pad_token_id=pad)
    return lm.tokenizer.decode(out[0, ids.shape[1]:].tolist(), skip_special_tokens=True).split("\n")[0]


def test_generate_is_exact_match_of_transformers_greedy_output(tiny_causal) -> None:
    # Targets come from transformers' model.generate on each prompt alone, not from the evaluator under test:
    # headprune's batched, left-padded decoding must write the same text, and exact match follows it.
    task = generate_task()
    theirs = [_transformers_greedy(tiny_causal, e.prompt, task.max_new_tokens) for e in task.examples]
    usable = {i for i, text in enumerate(theirs) if text.strip()}
    assert usable, "the tiny model should produce some text before a newline"
    examples = tuple(Example(e.id, prompt=e.prompt, target=theirs[i].strip() if i in usable else "no such answer")
                     for i, e in enumerate(task.examples))
    result = evaluate(tiny_causal, Task("gen2", "generate", examples, max_new_tokens=4), batch_size=4)
    assert [r.text for r in result.results] == theirs
    assert [r.correct for r in result.results] == [i in usable for i in range(len(examples))]
    assert all(r.decision is not None and r.decision >= 0 for r in result.results)


def test_generate_margin_matches_teacher_forcing_by_hand(tiny_causal) -> None:
    task = generate_task()
    result = evaluate(tiny_causal, task, batch_size=3)
    tok = tiny_causal.tokenizer
    for example, got in zip(task.examples, result.results):
        ctx = tok(example.prompt)["input_ids"]
        cont = tok(example.prompt + " " + example.target)["input_ids"][len(ctx):]
        with torch.no_grad():
            logprobs = F.log_softmax(tiny_causal.model(input_ids=torch.tensor([ctx + cont])).logits[0], -1)
        steps = []
        for t, token in enumerate(cont):
            row = logprobs[len(ctx) - 1 + t].clone()
            right = float(row[token])
            row[token] = float("-inf")
            steps.append(right - float(row.max()))
        assert got.margin == pytest.approx(min(steps), abs=1e-4)


def test_text_task_reports_mean_nll(tiny_causal) -> None:
    task = text_task()
    result = evaluate(tiny_causal, task)
    assert result.accuracy is None
    example = task.examples[0]
    ids = torch.tensor([tiny_causal.tokenizer(example.text)["input_ids"]])
    with torch.no_grad():
        loss = tiny_causal.model(input_ids=ids, labels=ids).loss
    assert -result.results[0].margin == pytest.approx(float(loss), abs=1e-4)
    assert result.mean_nll == pytest.approx(-result.margins.mean())


@pytest.mark.parametrize("make_task", [choice_task, generate_task, text_task])
def test_shared_prefix_gives_the_same_results(tiny_causal, make_task) -> None:
    task = prefixed(make_task())
    shared = Evaluator(tiny_causal, task, batch_size=5)
    plain = Evaluator(tiny_causal, task, batch_size=5, share_prefix=False)
    # Text tasks score every token, the prefix's too: nothing can be shared there.
    assert (len(shared.prefix) >= 16) == (task.kind != "text") and plain.prefix.tokens == ()
    heads = parse_heads("L0.H2,L1.H1")
    _assert_same(shared.run(), plain.run())
    _assert_same(shared.run(heads), plain.run(heads))


# ------------------------------------------------------------------ "identical" means the stated contract


@pytest.mark.slow  # decoding on two tasks x six conditions x two evaluators per family
@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt_neox"])
def test_fast_paths_keep_the_contract_against_a_plain_full_forward_pass(family, tokenizer) -> None:
    from headprune.evaluation import Evaluator
    from headprune.evaluation.contract import disagreement
    from headprune.heads import parse_heads
    from helpers import choice_task, generate_task, prefixed

    lm = build_tiny(family, tokenizer, seed=7, layers=4)
    for task in (prefixed(choice_task()), prefixed(generate_task())):
        plain = Evaluator(lm, task, batch_size=5, share_prefix=False)  # every token of every sequence, every layer
        fast = Evaluator(lm, task, batch_size=5, reuse_layers=True)  # shared prefix + layer cache (find's setup)
        assert fast._layer_cache.checkpoints and (fast.prefix or fast.scorer.generates) and not plain.prefix
        means = plain.head_means()
        assert disagreement(plain.run(), fast.run(), "float32")[0] is None  # the intact run fills the cache
        for spec in ("L0.H1", "L2.H0,L3.H3", "L1.H2"):
            for mode in ("zero", "mean"):
                heads = parse_heads(spec)
                reference = plain.run(heads, mode=mode, means=means)
                problem, _ = disagreement(reference, fast.run(heads, mode=mode, means=means), "float32")
                assert problem is None, f"{family} {task.name} {spec} {mode}: {problem}"
