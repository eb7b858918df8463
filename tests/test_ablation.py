"""Ablation by hook equals editing the output projection's weights by hand, for every family."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers.pytorch_utils import Conv1D

from headprune.errors import HeadSpecError, InternalCheckError
from headprune.heads import Head, parse_heads
from headprune.surgery.ablation import ablated, collect_head_means
from helpers import build_tiny, random_choice_task


def _inputs(lm, seed: int = 1) -> dict:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, lm.model.config.vocab_size, (3, 11), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, :4] = 0 if not lm.is_encoder else 1  # some left padding on causal models
    if lm.is_encoder:
        mask[1, 8:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _output(lm, inputs: dict) -> torch.Tensor:
    with torch.no_grad():
        out = lm.model(**inputs)
    return out.last_hidden_state if lm.is_encoder else out.logits


def _head_columns(lm, head: Head) -> tuple[torch.nn.Module, slice]:
    projection = lm.adapter.output_projection(lm.model, head.layer)
    dim = lm.grid.head_dim
    return projection, slice(head.head * dim, (head.head + 1) * dim)


def _edited_copy(lm, heads, means=None):  # noqa: ANN001, ANN202
    """A copy of ``lm`` whose output projections have the heads' input columns zeroed (for mean ablation,
    ``W_h @ mean`` added to the bias). The shared fixture is never edited."""
    edited = copy.deepcopy(lm)
    for head in heads:
        projection, cols = _head_columns(edited, head)
        with torch.no_grad():
            # Conv1D weight is (in, out); nn.Linear weight is (out, in).
            w_head = projection.weight[cols, :].T if isinstance(projection, Conv1D) else projection.weight[:, cols]
            if means is not None:
                shift = w_head @ means[head.layer, head.head]
                if projection.bias is None:
                    projection.bias = torch.nn.Parameter(torch.zeros(w_head.shape[0]))
                projection.bias += shift
            w_head.zero_()
    return edited


HEAD_SETS = [["L0.H1"], ["L1.H3"], ["L0.H0", "L0.H2", "L1.H1"]]


@pytest.mark.parametrize("names", HEAD_SETS)
def test_zero_hook_equals_zeroed_projection_columns(tiny, names: list[str]) -> None:
    heads = parse_heads(names)
    inputs = _inputs(tiny)
    intact = _output(tiny, inputs)
    with ablated(tiny, heads):
        hooked = _output(tiny, inputs)
    edited = _output(_edited_copy(tiny, heads), inputs)
    assert not torch.allclose(hooked, intact, atol=1e-5), "ablation must change the output"
    torch.testing.assert_close(hooked, edited, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(_output(tiny, inputs), intact)  # the hooks are gone


def test_mean_hook_equals_mean_folded_into_bias(tiny) -> None:
    inputs = _inputs(tiny, seed=3)
    mask = inputs["attention_mask"]
    means = collect_head_means(tiny, [(inputs["input_ids"], mask, {})])
    # The means computed independently: capture the projection inputs with a plain forward hook.
    grid = tiny.grid
    captured = {}
    hooks = [tiny.adapter.output_projection(tiny.model, layer).register_forward_hook(
        lambda module, args, out, layer=layer: captured.__setitem__(layer, args[0].detach()))
        for layer in range(grid.num_layers)]
    try:
        _output(tiny, inputs)
    finally:
        for hook in hooks:
            hook.remove()
    for layer, x in captured.items():
        per_head = x.view(*x.shape[:-1], grid.num_heads, grid.head_dim)
        expected = (per_head * mask[..., None, None]).sum((0, 1)) / mask.sum()
        torch.testing.assert_close(means[layer], expected, atol=1e-5, rtol=1e-5)
    heads = parse_heads("L0.H1,L1.H2")
    with ablated(tiny, heads, mode="mean", means=means):
        hooked = _output(tiny, inputs)
    folded = _output(_edited_copy(tiny, heads, means=means), inputs)
    torch.testing.assert_close(hooked, folded, atol=1e-4, rtol=1e-4)


def test_hooks_are_removed_when_an_exception_passes(tiny) -> None:
    inputs = _inputs(tiny)
    intact = _output(tiny, inputs)
    with pytest.raises(RuntimeError, match="boom"):
        with ablated(tiny, parse_heads("L0.H0,L1.H1")):
            raise RuntimeError("boom")
    torch.testing.assert_close(_output(tiny, inputs), intact)
    for layer in range(tiny.grid.num_layers):
        assert not tiny.adapter.output_projection(tiny.model, layer)._forward_pre_hooks


@pytest.mark.parametrize("name", ["L2.H0", "L0.H4", "L99.H99"])
def test_out_of_range_heads_are_refused(tiny, name: str) -> None:
    with pytest.raises(HeadSpecError, match="out of range"):
        with ablated(tiny, parse_heads(name)):
            pass


@pytest.mark.parametrize("name", ["L0H1", "l0.h1", "L-1.H0", "L0.H", "layer0.head1", "L0.H1.x"])
def test_malformed_head_names_are_refused(name: str) -> None:
    with pytest.raises(HeadSpecError, match="malformed head name"):
        parse_heads(name)


def test_head_names_round_trip() -> None:
    heads = parse_heads("L3.H2, L0.H1,L3.H2")
    assert [str(h) for h in heads] == ["L0.H1", "L3.H2"]


# ------------------------------------------------------------------ nothing silent: a hook that never fires


def test_a_hook_on_a_module_outside_the_forward_pass_is_an_internal_error(tokenizer, monkeypatch) -> None:
    from torch import nn

    from headprune.evaluation import evaluate
    from headprune.heads import Head

    lm = build_tiny("gpt2", tokenizer, seed=7)
    stray = nn.Linear(4, 4)
    real = type(lm.adapter).output_projection
    monkeypatch.setattr(type(lm.adapter), "output_projection",
                        lambda self, model, layer: stray if layer == 1 else real(self, model, layer))
    with pytest.raises(InternalCheckError, match=r"layer 1 \(L1.H0\) ran 0 times"):
        evaluate(lm, random_choice_task(6), heads=[Head(0, 1), Head(1, 0)])
