"""Gemma 4's key/value sharing: a layer that reads an earlier layer's keys and values (``LayerHeads.kv_source``)
keeps reading the same ones whatever heads go. The plan keeps in the source every key/value head a reader's kept
heads read; the sliced safetensors export and the sliced GGUF (llama.cpp's gemma4 graph, per-layer head counts) are
compared with the masked original by their logits, as is the GGUF of a model with experts (26B-A4B's block)."""

from __future__ import annotations

import pytest
import torch
from helpers import choice_task, generate_task, prefixed
from helpers.gguf_file import gguf_knows, gguf_metadata

from headprune.exporter import export, runtimes
from headprune.exporter.formats.gguf import Gguf
from headprune.exporter.gguf.size import CONTEXT
from headprune.heads import HeadGrid, LayerHeads, parse_heads
from headprune.loading.adapters.gemma4 import GELU_TABLE_PLE
from headprune.loading.models import load, wrap_model
from headprune.surgery.ablation import ablated
from headprune.surgery.plan import plan_layers
from headprune.testing import family_model

# The tiny model's layers: sliding (4 heads over 2 KV), full (4 over 1, keys as values), then a sliding and a full
# layer that read layers 0 and 1. Layer 0 loses its whole second group, which layer 2's one kept head (H2) still
# reads; layer 3 loses one head.
HEADS = "L0.H2,L0.H3,L2.H0,L2.H1,L2.H3,L3.H1"
SLIDING, FULL = LayerHeads(4, 2, 16, 16), LayerHeads(4, 1, 32, 32)
GRID = HeadGrid((SLIDING, FULL, LayerHeads(4, 2, 16, 16, kv_source=0), LayerHeads(4, 1, 32, 32, kv_source=1)))


@pytest.mark.parametrize(("kv_map", "layouts"), [
    (True, ["mapped", "unchanged", "mapped", "grouped"]),
    (False, ["keep-zeroed", "unchanged", "keep-zeroed", "grouped"])])
def test_a_source_keeps_the_key_value_heads_its_readers_read(kv_map, layouts) -> None:
    plans = plan_layers(GRID, parse_heads(HEADS), kv_map=kv_map)
    assert [p.layout for p in plans] == layouts
    assert plans[0].kv_heads == (0, 1) and plans[2].kv_heads == plans[0].kv_heads  # group 1: layer 2's H2 reads it
    assert set(plans[0].q_heads) - set(plans[0].zeroed) == {0, 1}
    assert set(plans[2].q_heads) - set(plans[2].zeroed) == {2}
    if kv_map:  # layer 0 keeps KV head 1 for its reader only; layer 2's one head reads slot 1 (KV head 1)
        assert plans[0].q_heads == (0, 1) and plans[2].kv_slots == (1,)
    # Nobody reads a group: the source drops it.
    plans = plan_layers(GRID, parse_heads("L0.H2,L0.H3,L2.H2,L2.H3"), kv_map=kv_map)
    assert plans[0].kv_heads == plans[2].kv_heads == (0,) and plans[2].q_heads == (0, 1)


def _logits(model, ids: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
    with torch.no_grad():
        return model(input_ids=ids).logits[0].float()


def test_sliced_exports_read_what_the_masked_original_reads(tokenizer, tmp_path) -> None:
    lm = wrap_model(family_model("gemma4_text", len(tokenizer), seed=2), tokenizer, name="tiny-gemma4")
    assert lm.grid.layers[2].kv_source == 0 and lm.grid.layers[3].kv_source == 1
    heads = parse_heads(HEADS)
    ids = torch.tensor([tokenizer("a dull and lifeless movie with nothing to say, the film is")["input_ids"]])
    with ablated(lm, heads):
        want = _logits(lm.model, ids)
    assert float((want - _logits(lm.model, ids)).abs().max()) > 1e-2
    record = export(lm, heads, layout="sliced", verify_task=choice_task(), out=tmp_path / "s")
    assert record.verification.task.disagreements == 0 and record.parameters.after < record.parameters.before
    torch.testing.assert_close(_logits(load(tmp_path / "s", device="cpu").model, ids), want, atol=1e-5, rtol=1e-5)
    if not gguf_knows("gemma4"):
        return
    record = export(lm, heads, format="gguf", layout="sliced", verify_task=generate_task(), out=tmp_path / "g")
    info = Gguf.details(record)
    assert info.architecture == "gemma4" and info.runtime.done and info.runtime.mismatches == 0
    _, meta = gguf_metadata(tmp_path / "g" / "model.gguf")
    assert list(meta["gemma4.attention.head_count"]) == [4, 4, 2, 3]  # even groups: removed heads kept zeroed
    assert list(meta["gemma4.attention.head_count_kv"]) == [2, 1, 2, 1]
    runner = runtimes.LlamaCppModel(tmp_path / "g" / "model.gguf", n_ctx=128, eos=())
    try:
        diff = float((runner.logits(ids[0].tolist()) - want).abs().max())
    finally:
        runner.close()
    assert diff <= GELU_TABLE_PLE * max(1.0, float(want.abs().max())), diff
    # The key/value cache the record states is what llama.cpp allocates: the two storing layers' own (a sliding one
    # of 2 heads of 16, a full one of 1 of 32), none for the layers that read them.
    size = info.size
    assert size.kv_bytes == size.original_kv_bytes == 2 * (2 * 16 + 32) * CONTEXT * 2
    assert (_logged_cache(tmp_path / "g" / "model.gguf", flash_attn=True),
            _logged_cache(tmp_path / "g" / "model.gguf", flash_attn=False)) == (size.kv_bytes, size.kv_bytes_no_flash)


def _logged_cache(path, *, flash_attn: bool) -> int:  # noqa: ANN001
    """The key and value caches llama.cpp allocates for ``path`` at a 4k context in f16 (the sliding layers' and the
    others'), from its own log."""
    import re

    from headprune.exporter.llama_cpp import runtime as llama_cpp_runtime

    llm = llama_cpp_runtime.LlamaCpp(path, n_ctx=CONTEXT, kv_f32=False, flash_attn=flash_attn, threads=1)
    try:
        log = "".join(text for _, text in llm.binding.log)
    finally:
        llm.close()
    caches = re.findall(r"K \(f16\):\s*([\d.]+) MiB, V \(f16\):\s*([\d.]+) MiB", log)
    return round(sum(float(k) + float(v) for k, v in caches) * 2**20)


def test_experts_in_llama_cpp_read_the_routers_scales(tokenizer, tmp_path) -> None:
    """26B-A4B's MoE block beside the MLP: the router's input scale and per-expert scale (random here, so that they
    show in the logits) are written where llama.cpp's gemma4 graph reads them, and the file runs like the masked
    original."""
    if not gguf_knows("gemma4"):
        return
    model = family_model("gemma4_text", len(tokenizer), seed=2, enable_moe_block=True, num_experts=4, top_k_experts=2,
                         moe_intermediate_size=32)
    lm = wrap_model(model, tokenizer, name="tiny-gemma4-moe")
    ids = torch.tensor([tokenizer("a dull and lifeless movie with nothing to say, the film is")["input_ids"]])
    plain = _logits(model, ids)
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.router.scale.copy_(torch.rand(layer.router.scale.shape, generator=generator) * 2)
            layer.router.per_expert_scale.copy_(torch.rand(4, generator=generator) * 2)
    heads = parse_heads(HEADS)
    with ablated(lm, heads):
        want = _logits(model, ids)
    gate = GELU_TABLE_PLE * max(1.0, float(want.abs().max()))
    assert float((_logits(model, ids) - plain).abs().max()) > 10 * gate  # the scales matter
    record = export(lm, heads, format="gguf", layout="sliced", verify_task=generate_task(), out=tmp_path / "g")
    assert Gguf.details(record).runtime.mismatches == 0
    reader, meta = gguf_metadata(tmp_path / "g" / "model.gguf")
    assert {"blk.0.ffn_gate_inp.scale", "blk.0.ffn_down_exps.scale"} <= {t.name for t in reader.tensors}
    assert meta["gemma4.expert_count"] == 4
    runner = runtimes.LlamaCppModel(tmp_path / "g" / "model.gguf", n_ctx=128, eos=())
    try:
        diff = float((runner.logits(ids[0].tolist()) - want).abs().max())
    finally:
        runner.close()
    assert diff <= gate, diff


@pytest.mark.parametrize("make_task", [choice_task, generate_task, lambda: prefixed(generate_task())])
def test_the_layer_cache_starts_no_pass_above_a_layer_whose_keys_are_read(make_task, tokenizer) -> None:
    """Six layers, the last two reading layers 2 and 3: a pass started at layer 3 or above would not compute the
    keys and values layer 4 reads, so the cache's checkpoints stop at layer 2, and its results are a full pass's."""
    import numpy as np

    from headprune.evaluation import Evaluator

    model = family_model("gemma4_text", len(tokenizer), seed=7, num_hidden_layers=6,
                         layer_types=["sliding_attention", "full_attention"] * 3)
    lm = wrap_model(model, tokenizer, name="tiny-gemma4-deep")
    assert [layer.kv_source for layer in lm.grid.layers] == [None, None, None, None, 2, 3]
    plain = Evaluator(lm, make_task(), batch_size=5)
    cached = Evaluator(lm, make_task(), batch_size=5, reuse_layers=True)
    assert cached._layer_cache.checkpoints == [1, 2]
    for run in (plain, cached):
        run.run()
    for spec in ("L2.H1", "L3.H0,L4.H2", "L5.H3", "L1.H0,L4.H1"):
        a, b = plain.run(parse_heads(spec)), cached.run(parse_heads(spec))
        assert a.texts == b.texts and [r.correct for r in a.results] == [r.correct for r in b.results]
        np.testing.assert_allclose(a.margins, b.margins, rtol=0, atol=1e-5)
