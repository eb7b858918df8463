"""Starting ablated runs from cached layer inputs gives exactly the results of full passes."""

from __future__ import annotations

import numpy as np
import pytest

from headprune.errors import InternalCheckError
from headprune.evaluation import Evaluator
from headprune.evaluation.layer_cache import LayerInputCache
from headprune.heads import parse_heads
from helpers import choice_task, generate_task, prefixed, text_task
from helpers import build_tiny, random_choice_task


def prefixed_choice_task():  # noqa: ANN201
    return prefixed(choice_task())


def prefixed_generate_task():  # noqa: ANN201
    return prefixed(generate_task())  # decoding reads every layer of the shared prefix's keys and values

HEAD_SETS = ["L1.H0", "L1.H3", "L0.H2,L1.H1", "L0.H1"]


def _deep(family: str, tokenizer):  # noqa: ANN001, ANN202
    """A 4-layer tiny model, so that there are layers to skip."""
    return build_tiny(family, tokenizer, seed=7, layers=4)


CASES = [(family, make_task) for family in ["llama", "gemma2", "gpt2", "gpt_neox", "bert"]
         for make_task in [choice_task, generate_task, text_task, prefixed_choice_task, prefixed_generate_task]
         if family != "bert" or make_task is choice_task]


@pytest.mark.parametrize(("family", "make_task"), CASES)
def test_cached_layers_give_identical_results(family, make_task, tokenizer) -> None:
    lm = _deep(family, tokenizer)
    task = make_task()
    plain = Evaluator(lm, task, batch_size=5)
    cached = Evaluator(lm, task, batch_size=5, reuse_layers=True)
    assert cached._layer_cache.checkpoints == [1, 2, 3]
    means = plain.head_means()
    for run in (plain, cached):
        run.run()  # the intact run fills the cache of `cached`
    assert cached._layer_cache.complete(len(cached._batches))
    for spec in HEAD_SETS + ["L3.H2", "L2.H0,L3.H3"]:
        heads = parse_heads(spec)
        for mode in ("zero", "mean"):
            a = plain.run(heads, mode=mode, means=means)
            b = cached.run(heads, mode=mode, means=means)
            assert [r.correct for r in a.results] == [r.correct for r in b.results]
            assert a.texts == b.texts
            np.testing.assert_allclose(a.margins, b.margins, rtol=0, atol=1e-5)
    # The model is left intact: no pass-through layers or hooks remain.
    again = cached.run()
    np.testing.assert_allclose(again.margins, plain.run().margins, rtol=0, atol=1e-6)


def test_a_layer_reading_an_earlier_layers_choice_is_no_checkpoint(tokenizer) -> None:
    """GLM-5's "shared" sparse-attention layers reuse the keys the layer before chose (Adapter.layer_starts): a pass
    starts only at a layer that chooses its own, and gives the full pass's results."""
    from headprune.loading.models import wrap_model
    from headprune.testing import family_model

    model = family_model("glm_moe_dsa", len(tokenizer), seed=7, num_hidden_layers=4,
                         indexer_types=["full", "shared", "full", "shared"])
    lm = wrap_model(model, tokenizer, name="tiny-glm_moe_dsa")
    task = prefixed_choice_task()
    plain = Evaluator(lm, task, batch_size=5)
    cached = Evaluator(lm, task, batch_size=5, reuse_layers=True)
    assert cached._layer_cache.checkpoints == [2]
    for run in (plain, cached):
        run.run()
    for spec in ["L1.H0", "L2.H1", "L3.H2", "L0.H1,L3.H0"]:
        a, b = plain.run(parse_heads(spec)), cached.run(parse_heads(spec))
        np.testing.assert_allclose(a.margins, b.margins, rtol=0, atol=1e-5)


@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt_neox"])
def test_the_shared_prefix_is_replayed_from_the_checkpoint(family, tokenizer) -> None:
    """An ablated run computes the shared prefix from the checkpoint layer on, like its batches: the layers below
    it see no prompt token (their keys and values are the intact run's; the output head's flush passes one token)."""
    lm = _deep(family, tokenizer)
    cached = Evaluator(lm, prefixed_choice_task(), batch_size=5, reuse_layers=True)
    assert cached.prefix
    cached.run()
    tokens = []
    handle = lm.adapter.layers(lm.model)[0].register_forward_pre_hook(
        lambda module, args, kwargs: tokens.append(_hidden(args, kwargs).shape[1]), with_kwargs=True)
    try:
        cached.run(parse_heads("L2.H1"))
        assert set(tokens) == {1}
        tokens.clear()
        cached.run(parse_heads("L0.H1"))
        assert len(cached.prefix) in tokens and len([t for t in tokens if t > 1]) == 1 + len(cached._batches)
    finally:
        handle.remove()


def _hidden(args: tuple, kwargs: dict):  # noqa: ANN202
    return args[0] if args else kwargs["hidden_states"]


def test_budget_spaces_checkpoints(tokenizer) -> None:
    lm = _deep("llama", tokenizer)
    assert LayerInputCache.for_budget(lm, 1000, budget_mb=100).checkpoints == [1, 2, 3]
    per_layer_mb = 1_000_000 * 32 * 4 / 2**20
    spaced = LayerInputCache.for_budget(lm, 1_000_000, budget_mb=int(per_layer_mb * 1.5))
    assert spaced.checkpoints == [2]
    assert LayerInputCache.for_budget(lm, 1_000_000, budget_mb=int(per_layer_mb * 2.5)).checkpoints == [1, 2]
    assert LayerInputCache.for_budget(lm, 1_000_000, budget_mb=1).checkpoints == []
    assert spaced.start_for(1) == 0 and spaced.start_for(3) == 2
    # A bfloat16 model's captured inputs take half the bytes: the same budget holds twice the checkpoints.
    import copy

    import torch

    half = copy.deepcopy(lm)
    half.model.to(torch.bfloat16)
    assert LayerInputCache.for_budget(half, 1_000_000, budget_mb=int(per_layer_mb * 1.6)).checkpoints == [1, 2, 3]


# ------------------------------------------------------------------ nothing silent: a replay that starts at the wrong layer


def _cached_evaluator(lm):  # noqa: ANN001, ANN202
    from headprune.evaluation import Evaluator
    from headprune.evaluation.layer_cache import LayerInputCache

    evaluator = Evaluator(lm, random_choice_task(12, seed=6), batch_size=4, reuse_layers=True)
    evaluator._layer_cache = LayerInputCache(lm, [1, 2])  # checkpoints at layers 1 and 2 of 4
    evaluator.run()  # the intact run captures the layer inputs
    return evaluator


def test_a_replay_that_starts_above_the_ablated_layer_is_an_internal_error(tokenizer, monkeypatch) -> None:
    from headprune.evaluation.layer_cache import LayerInputCache
    from headprune.heads import Head

    lm = build_tiny("llama", tokenizer, seed=7, layers=4)
    evaluator = _cached_evaluator(lm)
    sound = evaluator.run([Head(1, 1)])  # replays from layer 1: fine
    monkeypatch.setattr(LayerInputCache, "start_for", lambda self, lowest: 2)  # an off-by-one bug
    with pytest.raises(InternalCheckError, match=r"ablation hook of layer 1 \(L1.H1\) ran \d+ times in \d+ forward"):
        evaluator.run([Head(1, 1)])
    monkeypatch.undo()
    assert evaluator.run([Head(1, 1)]) == sound


def test_a_replay_that_never_feeds_its_start_layer_is_an_internal_error(tokenizer, monkeypatch) -> None:
    import copy

    from headprune.heads import Head

    lm = build_tiny("llama", tokenizer, seed=7, layers=4)
    evaluator = _cached_evaluator(lm)
    real = type(lm.adapter).layers_container
    # An adapter bug: the replay patches copies of the layers, not those the model runs, so the pass does not
    # start from the cache.
    monkeypatch.setattr(type(lm.adapter), "layers_container", lambda self, model: copy.deepcopy(real(self, model)))
    with pytest.raises(InternalCheckError, match="should start at layer 2, but layer 2 was fed 0 times"):
        evaluator.run([Head(3, 0)])
