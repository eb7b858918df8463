"""The generation shortcut (``headprune.evaluation.generation``) writes what plain ``model.generate`` writes.

References come from transformers' own greedy ``generate``, one prompt at a time, to ``max_new_tokens``, cut at
the first newline: never from the evaluator under test. Every causal family, intact and with a head zeroed, with
and without a shared few-shot prefix; targets set to what greedy wrote, so most examples are decided from the
teacher-forced pass alone, and some of them are spelled by greedy with other tokens than the target's own
tokenisation (the shortcut must then decode, not conclude from the target's tokens).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headprune.evaluation import Evaluator
from headprune.evaluation.contract import allowance, disagreement
from headprune.evaluation.decoding import looked_up
from headprune.evaluation.results import EvalResult, ExampleResult
from headprune.heads import Head
from headprune.surgery.ablation import ablated
from headprune.tasks import Example, Task
from helpers import PROMPTS, SHOTS, build_tiny

EXTRA_PROMPTS = ["the film", "12 +", "Review: it", "a dull", "so on", "8 * 3", "nothing to"]


def greedy_texts(lm, prompts: list[str], max_new_tokens: int, heads: tuple[Head, ...] = (),  # noqa: ANN001
                 until: tuple[str, ...] = ("\n",)) -> tuple[list[str], list[list[int]]]:
    """transformers' greedy decoding of each prompt alone: the text to the first stop string, and the tokens."""
    tok = lm.tokenizer
    texts, tokens = [], []
    with torch.inference_mode(), ablated(lm, heads):
        for prompt in prompts:
            ids = torch.tensor([tok(prompt)["input_ids"]])
            out = lm.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                    max_new_tokens=max_new_tokens, pad_token_id=tok.pad_token_id)
            tokens.append(out[0, ids.shape[1]:].tolist())
            text = tok.decode(tokens[-1], skip_special_tokens=True)
            for marker in until:
                text = text.split(marker, 1)[0]
            texts.append(text)
    return texts, tokens


def answered_task(prompts: list[str], texts: list[str], style: str) -> Task:
    """Targets that are what greedy wrote (where it wrote something), so the shortcut has work to decide:
    compared as written, trimmed (scored after one space: greedy may spell it with other tokens), or as written
    with stop strings that end answers mid-way."""
    trimmed = style == "trimmed"
    return Task("greedy", "generate", tuple(
        Example(f"g{i}", prompt=p, target=(t.strip() if trimmed else t) if t.strip() else "none")
        for i, (p, t) in enumerate(zip(prompts, texts))), max_new_tokens=MAX_NEW, strip_answers=trimmed,
        until=STOPS if style == "stop-strings" else ())


def assert_same_texts(result: EvalResult, texts: list[str]) -> None:
    """Every text equal, except where greedy's choice was a tie within float32's tolerance (the contract)."""
    gaps = np.array([r.decision for r in result.results])
    ties = np.abs(gaps) <= allowance("float32", gaps)
    differ = [(r.id, r.text, t) for r, t, tie in zip(result.results, texts, ties) if r.text != t and not tie]
    assert not differ


MAX_NEW = 4
STOPS = ("e", "o")
TRAPPED = {"tiny-qwen2"}


@pytest.mark.parametrize("style,shots", [("as-written", False), ("as-written", True), ("trimmed", False),
                                         ("stop-strings", False)])
def test_shortcut_writes_what_generate_writes(tiny_causal, style: str, shots: bool) -> None:
    lm = tiny_causal
    prompts = [(SHOTS if shots else "") + p for p in PROMPTS + EXTRA_PROMPTS]
    head = Head(1, 2)
    until = STOPS if style == "stop-strings" else ("\n",)
    intact, intact_tokens = greedy_texts(lm, prompts, MAX_NEW, until=until)
    ablated_texts, _ = greedy_texts(lm, prompts, MAX_NEW, (head,), until=until)
    task = answered_task(prompts, intact, style)
    evaluator = Evaluator(lm, task, batch_size=4, reuse_layers=True)
    assert evaluator.generation.shortcut and bool(evaluator.prefix) == shots
    base = evaluator.run()
    assert_same_texts(base, intact)
    if style != "trimmed":  # targets in greedy's own spelling: the teacher-forced pass decides most examples
        assert evaluator.generation.decoded_rows < len(prompts)
    assert_same_texts(evaluator.run([head]), ablated_texts)  # from the layer cache, under ablation
    # Traps: greedy's tokens are not the target's own tokenisation, yet its text is the target: answered right
    # (a shortcut that concluded from the target's tokens would call these wrong).
    tok = lm.tokenizer
    traps = [i for i, (prompt, text, written) in enumerate(zip(prompts, intact, intact_tokens))
             if text.strip() and text == " " + text.strip()
             and written[:len(tok(prompt + text)["input_ids"]) - len(tok(prompt)["input_ids"])]
             != tok(prompt + text)["input_ids"][len(tok(prompt)["input_ids"]):]]
    if style == "trimmed":
        assert all(base.results[i].correct and base.results[i].margin < 0 for i in traps)
        assert traps or lm.name not in TRAPPED  # these families' greedy texts include such spellings


def test_plain_generate_when_the_generation_config_changes_scores(tiny_causal) -> None:
    lm = tiny_causal
    prompts = PROMPTS + EXTRA_PROMPTS
    lm.model.generation_config.repetition_penalty = 1.5
    try:
        texts, _ = greedy_texts(lm, prompts, MAX_NEW)
        evaluator = Evaluator(lm, answered_task(prompts, texts, "as-written"), batch_size=4)
        assert not evaluator.generation.shortcut
        assert_same_texts(evaluator.run(), texts)
    finally:
        lm.model.generation_config.repetition_penalty = 1.0


def test_contract_compares_generated_texts() -> None:
    def result(texts: list[str], gaps: list[float]) -> EvalResult:
        return EvalResult("t", "generate", tuple(ExampleResult(f"e{i}", False, -1.0, text=t, decision=g)
                                                 for i, (t, g) in enumerate(zip(texts, gaps))))

    reference = result(["a", "b"], [2.0, 1e-6])
    assert disagreement(reference, result(["a", "b"], [2.0, 1e-6]), "float32")[0] is None
    assert disagreement(reference, result(["a", "c"], [2.0, 1e-6]), "float32")[0] is None  # a tie may change
    problem, _ = disagreement(reference, result(["x", "b"], [2.0, 1e-6]), "float32")
    assert problem is not None and "wrote other text" in problem


@pytest.mark.parametrize("solution", [False, True])
def test_code_completions_stop_where_generate_with_stop_strings_would(tiny_causal, solution: bool,  # noqa: ANN001
                                                                      strongest_sandbox) -> None:
    """A code task's greedy decoding ends at its stop strings, as a harness passing them to ``generate`` does:
    the same completion as plain ``generate`` to ``max_new_tokens``, cut; and fewer model calls when every
    printable character stops a completion than when none does. With a reference solution teacher-forced, from
    its keys and values."""
    import string

    from headprune.scoring.execution import permit_code_execution

    lm, steps = tiny_causal, 12
    prompts = PROMPTS[:4] + EXTRA_PROMPTS[:4]  # every example's program runs in a process of its own
    texts, _ = greedy_texts(lm, prompts, steps, until=STOPS)
    printable, never = tuple(string.printable), ("\x00",)
    calls: list[int] = []
    handle = lm.model.register_forward_pre_hook(lambda *_: calls.append(1))
    counts = {}
    try:
        for until in (STOPS, printable, never):
            task = Task("code", "code", tuple(
                Example(f"c{i}", prompt=p, tests="def check(f):\n    pass\n", entry_point="f",
                        target=" the film" if solution else "") for i, p in enumerate(prompts)),
                max_new_tokens=steps, until=until)
            with permit_code_execution():
                evaluator = Evaluator(lm, task, batch_size=4)
                calls.clear()
                result = evaluator.run()
            counts[until] = len(calls)
            if until == STOPS:
                assert_same_texts(result, texts)
    finally:
        handle.remove()
    assert counts[printable] < counts[never]


def test_drafted_decoding_writes_what_generate_writes(tiny_causal) -> None:
    """After the intact run, a condition's decoding reads the intact text's next tokens in the same step
    (``Generation._draft``): greedy keeps those it chooses too and goes on after the last one from the right
    position, with the rest hidden. Long answers, few rows per step (many drafted tokens), no target that
    decides them, and ablations that change some texts part-way: every text as plain ``generate`` writes it, and
    drafted tokens both kept and refused."""
    lm, steps = tiny_causal, 12
    prompts = PROMPTS + EXTRA_PROMPTS
    task = Task("long", "generate", tuple(Example(f"g{i}", prompt=p, target="none") for i, p in enumerate(prompts)),
                max_new_tokens=steps, until=("\x00",))
    evaluator = Evaluator(lm, task, batch_size=2, reuse_layers=True)
    conditions = [(), (Head(1, 2),), (Head(0, 1), Head(1, 0)), (Head(0, 3),)]
    for heads in conditions:
        texts, _ = greedy_texts(lm, prompts, steps, heads, until=("\x00",))
        assert_same_texts(evaluator.run(heads), texts)
    generation = evaluator.generation
    assert 0 < generation.drafts_kept < generation.drafted


def test_a_draft_is_what_followed_the_text_s_last_tokens_where_they_came_before() -> None:
    text = [5, 6, 7, 8, 9, 1, 5, 6, 7]
    assert looked_up(text, [], 2) == [8, 9]  # the last three tokens came before: what followed them
    assert looked_up([4, 6, 7, 2, 6, 7], [], 5) == [2, 6, 7]  # two of them: up to the text's end
    assert looked_up([4, 3, 2, 1, 9, 2], [], 1) == [1]  # only the last token came before
    assert looked_up([1, 5, 6, 7], [9, 5, 6, 7, 8, 4], 3) == [8, 4]  # in the other text (the intact run's)
    assert looked_up([6, 7, 1, 6, 7, 2, 6, 7], [], 1) == [2]  # the latest occurrence
    assert looked_up([1, 2, 3], [4, 5], 4) == [] and looked_up([1, 2, 3, 2], [], 0) == []


@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt_neox"])
def test_a_text_that_starts_as_the_intact_one_is_read_from_the_ablated_layer_up(tokenizer, family) -> None:
    """Where an ablated row's decoding starts where the intact run's did, its first step reads the intact text
    from the checkpoint below the ablation (``evaluation.continuation``): the layers below pass through, with the
    intact run's inputs and keys and values there. Four layers, so that there is something below; ablations high
    and low, some changing texts part-way: every text as plain ``generate`` writes it, and rows replayed (in the
    first layer too, where the step over the intact text is a plain one)."""
    lm, steps = build_tiny(family, tokenizer, layers=4), 10
    prompts = [SHOTS + p for p in PROMPTS + EXTRA_PROMPTS]
    task = Task("long", "generate", tuple(Example(f"g{i}", prompt=p, target="none") for i, p in enumerate(prompts)),
                max_new_tokens=steps, until=("\x00",))
    evaluator = Evaluator(lm, task, batch_size=4, reuse_layers=True)
    continuations, replayed = evaluator.generation.continuations, []
    for heads in [(), (Head(3, 2),), (Head(2, 1), Head(3, 0)), (Head(1, 3),), (Head(0, 0),)]:
        texts, _ = greedy_texts(lm, prompts, steps, heads, until=("\x00",))
        before = continuations.replayed_rows
        assert_same_texts(evaluator.run(heads), texts)
        replayed.append(continuations.replayed_rows - before)
    assert sum(replayed) >= 3 * len(prompts) // 2 and replayed[-1] > 0, replayed


@pytest.mark.slow
def test_drafted_decoding_of_smollm2_writes_what_generate_writes(smollm2) -> None:
    """The drafted-decoding check above on a real model, whose texts move with every position id (a tiny random
    model's barely do): a drafted token greedy refused must leave the row going on from the right position."""
    from headprune.tasks import load_task

    prompts = [e.prompt for e in load_task("arithmetic:n=10").examples]
    steps, never = 20, ("\x00",)
    task = Task("long", "generate", tuple(Example(f"a{i}", prompt=p, target="none") for i, p in enumerate(prompts)),
                max_new_tokens=steps, until=never)
    evaluator = Evaluator(smollm2, task, batch_size=2, reuse_layers=True)
    for heads in [(), (Head(0, 0),), (Head(2, 4), Head(20, 1)), (Head(29, 3),)]:
        texts, _ = greedy_texts(smollm2, prompts, steps, heads, until=never)
        assert_same_texts(evaluator.run(heads), texts)
    generation = evaluator.generation
    assert 0 < generation.drafts_kept < generation.drafted
