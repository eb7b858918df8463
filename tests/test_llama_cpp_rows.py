"""llama.cpp's task runs on a shared prompt prefix (headprune/exporter/llama_cpp/rows.py): its keys and values are
evaluated once and given to every row, the rows decode side by side, and the answers, margins and logits are those of
every row run alone from its first token, as the checks ran before.

Needs llama.cpp (xllamacpp), like tests/test_gguf.py; fails without it.
"""

from __future__ import annotations

import pytest
import torch
from helpers import build_tiny, choice_task, generate_task, prefixed, text_task

from headprune.evaluation import Evaluator
from headprune.exporter.gguf import writer as gguf_export
from headprune.exporter.runtimes import LlamaCppModel
from headprune.loading.models import LoadedModel
from headprune.surgery.plan import plan_layers


@pytest.fixture(scope="module")
def files(tokenizer, tmp_path_factory):  # noqa: ANN001, ANN201
    """A tiny llama as the stock llama architecture in float32 and sliced (deci, per-layer head counts) in q8_0."""
    lm = build_tiny("llama", tokenizer, seed=3)
    if gguf_export.llama_cpp_version()[0] is None:
        pytest.fail("these tests run GGUF files in llama.cpp (pip install 'headprune[gguf]')")
    folder = tmp_path_factory.mktemp("rows")
    dense = gguf_export.write_files(lm, lm.model, "llama", None, folder, folder, "f32").path
    from headprune.surgery.slicing import slice_model

    heads = lm.grid.check(_heads(lm))
    plans = plan_layers(lm.grid, heads, kv_map=False)
    sliced = slice_model(lm, plans, heads)
    (folder / "s").mkdir()
    typed = gguf_export.write_files(lm, sliced, "deci", plans, folder / "s", folder / "s", "q8_0").path
    return lm, {"llama f32": dense, "deci q8_0": typed}


def _heads(lm):  # noqa: ANN001, ANN202
    from headprune.heads import parse_heads

    return parse_heads("L1.H0,L1.H1")  # a whole key/value group


class Today(LlamaCppModel):
    """The task path before the shared prefix: each row alone from its first token, and ``generate`` running every
    row to ``max_new_tokens`` (or end-of-sequence) without the evaluator's stopping criteria."""

    def generate(self, **options: object) -> torch.Tensor:  # type: ignore[override]
        options.pop("stopping_criteria", None)
        return super().generate(**options)


def _run(lm, runner, task):  # noqa: ANN001, ANN202
    model = LoadedModel("gguf", lm.folder, runner, lm.tokenizer, lm.adapter, lm.grid, lm.model_class)
    try:
        return Evaluator(model, task, batch_size=5, share_prefix=False).run()
    finally:
        runner.close()


@pytest.mark.parametrize("file", ["llama f32", "deci q8_0"])
@pytest.mark.parametrize("make", [generate_task, choice_task, text_task])
def test_answers_are_the_same_with_and_without_the_shared_prefix(files, file, make) -> None:
    lm, paths = files
    task = prefixed(make())
    before = _run(lm, Today(paths[file], n_ctx=128, eos=(lm.tokenizer.eos_token_id,), threads=1), task)
    # 3 rows at a time in 300 cells: the 12 examples of a batch of 5 go in several groups.
    after = _run(lm, LlamaCppModel(paths[file], n_ctx=100, eos=(lm.tokenizer.eos_token_id,), threads=1, rows=3),
                 task)
    assert len(before.results) == len(after.results) == len(task)
    for a, b in zip(before.results, after.results):
        assert (a.correct, a.text) == (b.correct, b.text), (a, b)
        assert abs(a.margin - b.margin) <= 1e-4 * max(1.0, abs(a.margin)), (a, b)
    if make is generate_task:
        assert any(r.text for r in after.results)  # something was decoded


def test_the_prefix_is_evaluated_once_and_the_logits_are_every_rows_own(files) -> None:
    """Every position's logits of left- and right-padded rows as each row alone gives them, with the shared prefix's
    tokens decoded once for two calls, and each row's tokens after it once."""
    lm, paths = files
    prompts = [example.prompt for example in prefixed(generate_task()).examples]
    rows = [lm.tokenizer(p)["input_ids"] for p in prompts]
    alone = LlamaCppModel(paths["deci q8_0"], n_ctx=128, eos=(), threads=1)
    shared = LlamaCppModel(paths["deci q8_0"], n_ctx=128, eos=(), threads=1, rows=4)
    decoded = []
    decode = shared.llm.decode
    shared.llm.decode = lambda entries: decoded.append(len(entries)) or decode(entries)  # type: ignore[method-assign]
    try:
        want = [alone.logits(row) for row in rows]
        width = max(map(len, rows))
        for left in (True, False):
            ids = torch.zeros(len(rows), width, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for i, row in enumerate(rows):
                span = slice(width - len(row), width) if left else slice(0, len(row))
                ids[i, span], mask[i, span] = torch.tensor(row), 1
            got = shared(input_ids=ids, attention_mask=mask).logits
            kept = shared(input_ids=ids, attention_mask=mask, logits_to_keep=3).logits
            for i, row in enumerate(rows):
                span = slice(width - len(row), width) if left else slice(0, len(row))
                assert torch.allclose(got[i, span], want[i], atol=1e-5, rtol=0), i
                assert (got[i][mask[i] == 0] == 0).all()
                if left:
                    assert torch.allclose(kept[i], want[i][-3:], atol=1e-5, rtol=0)
    finally:
        alone.close()
        shared.close()
    common = len(_common(rows))
    # The prefix once (its logits kept for later calls), then each row's own tokens in each of the 4 calls.
    assert sum(decoded) == common + 4 * sum(len(row) - common for row in rows), (decoded, common)
    assert common > 20


def _common(rows):  # noqa: ANN001, ANN202
    import os

    return os.path.commonprefix([list(r) for r in rows])


def test_a_sequence_run_alone_between_shared_calls_leaves_them_right(files) -> None:
    """The runtime gate decodes prompts alone in sequence 0 of the same context, between the task's shared calls."""
    lm, paths = files
    rows = [lm.tokenizer(e.prompt)["input_ids"] for e in prefixed(generate_task()).examples]
    alone = LlamaCppModel(paths["llama f32"], n_ctx=128, eos=(), threads=1)
    shared = LlamaCppModel(paths["llama f32"], n_ctx=128, eos=(), threads=1, rows=4)
    try:
        ids = torch.tensor([row[-8:] for row in rows])
        mask = torch.ones_like(ids)
        want = alone(input_ids=ids, attention_mask=mask).logits
        for _ in range(2):
            assert alone.greedy(rows[0], 5)[0] == shared.greedy(rows[0], 5)[0]
            assert torch.allclose(shared(input_ids=ids, attention_mask=mask).logits, want, atol=1e-5, rtol=0)
    finally:
        alone.close()
        shared.close()


def test_the_quantized_gates_differences_are_the_same_on_a_shared_prefix(files) -> None:
    """gguf_quant_check's root mean square over every real token: torch models reading the prefix's keys and values,
    and llama.cpp runners sharing it themselves, count the prefix once per sequence as if computed in each."""
    import copy

    from headprune.exporter.gguf.quant_check import _differences

    lm, paths = files
    other = copy.deepcopy(lm.model)
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.mul_(1.01)
    task = prefixed(choice_task())
    whole, shared = Evaluator(lm, task, batch_size=5, share_prefix=False), Evaluator(lm, task, batch_size=5)
    assert shared.prefix and not whole.prefix
    with torch.inference_mode():
        want = _differences(lm.model, other, whole)
        got = _differences(lm.model, other, shared)
    assert got[3] == want[3] and got[0] == pytest.approx(want[0], rel=1e-4)
    assert got[1] == pytest.approx(want[1], rel=1e-3)
    pairs = [[LlamaCppModel(paths["llama f32"], n_ctx=128, eos=(), threads=1, rows=rows),
              LlamaCppModel(paths["deci q8_0"], n_ctx=128, eos=(), threads=1, rows=rows)] for rows in (1, 4)]
    try:
        want, got = (_differences(*pair, evaluator) for pair, evaluator in zip(pairs, (whole, shared)))
    finally:
        for runner in (*pairs[0], *pairs[1]):
            runner.close()
    assert got[3] == want[3] and got[0] == pytest.approx(want[0], rel=1e-4)
    assert got[1] == pytest.approx(want[1], rel=1e-3)
    assert got[0] > 0.01


def test_greedy_side_by_side_is_each_prompt_alone(files) -> None:
    """The runtime gate's greedy decoding of many prompts at once, in torch (one batch) and in llama.cpp (rows on a
    shared prefix): the tokens and the logits behind each of one prompt decoded alone."""
    from headprune.exporter.runtimes import TorchRunner

    lm, paths = files
    prompts = [lm.tokenizer(e.prompt)["input_ids"] for e in prefixed(generate_task()).examples]
    eos = (lm.tokenizer.eos_token_id,)
    runners = [(TorchRunner(lm.model, eos=eos), TorchRunner(lm.model, eos=eos)),
               (LlamaCppModel(paths["llama f32"], n_ctx=128, eos=eos, threads=1),
                LlamaCppModel(paths["llama f32"], n_ctx=128, eos=eos, threads=1, rows=4))]
    try:
        for alone, together in runners:
            many = together.greedy_many(prompts, 9)
            for prompt, (tokens, logits) in zip(prompts, many):
                want, want_logits = alone.greedy(prompt, 9)
                assert tokens == want and len(logits) == len(want_logits) == len(tokens) > 0
                assert all(torch.allclose(a, b, atol=1e-4, rtol=0) for a, b in zip(logits, want_logits))
    finally:
        for runner in runners[1]:
            runner.close()
