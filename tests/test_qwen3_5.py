"""Qwen3.5's hybrid layers beyond the coverage matrix (tests/test_families.py runs every Qwen3.5 type through eval,
find, both layouts and loading): a Gated DeltaNet layer's value heads, named by the layer's own count, removed exactly
in each even layout its code takes; greedy decoding of a hybrid (whose recurrent state cannot be masked back) under
the ablation; a sliced export pruned again, its per-head parameters put back; and the GGUF file's Gated DeltaNet
tensors in the order llama.cpp's converter writes them, checked in llama.cpp at q8_0 on its own rounded weights.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from helpers import choice_task, generate_task, prefixed, save_folder
from helpers.cli import assert_refused, invoke

from headprune.errors import HeadSpecError
from headprune.evaluation import evaluate
from headprune.exporter import export
from headprune.heads import parse_heads
from headprune.loading.models import load, load_model, wrap_model
from headprune.surgery.ablation import ablated
from headprune.surgery.plan import plan_layers
from headprune.surgery.slicing import densify, slice_model
from headprune.testing import family_model

IDS = torch.tensor([[5, 9, 14, 3, 27, 8, 11], [0, 0, 0, 7, 19, 4, 2]])
MASK = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1]])
WIDE = dict(linear_num_value_heads=8, linear_num_key_heads=4)  # 8 value heads of 16 over 4 key heads of 8


def _logits(model) -> torch.Tensor:  # noqa: ANN001
    with torch.no_grad():
        return model(input_ids=IDS, attention_mask=MASK).logits[MASK.bool()]


def _lm(tokenizer, model_type: str = "qwen3_5_text", **changes):  # noqa: ANN001, ANN003, ANN202
    return wrap_model(family_model(model_type, len(tokenizer), seed=3, **changes), tokenizer, name=f"tiny-{model_type}")


@pytest.mark.parametrize(("heads", "layout"), [("L0.H2,L0.H3", "grouped"), ("L0.H1", "keep-zeroed"),
                                               ("L0.H1,L0.H3,L0.H5", "duplicate-kv")])
def test_a_gated_deltanet_value_head_is_its_slice_of_out_proj_and_goes_exactly(heads, layout, tokenizer) -> None:
    """A value head silenced is its 16 columns of ``out_proj``'s input zeroed (what ablation does, checked by hand
    here); slicing gives the same logits in the even layout the plan picks (a Gated DeltaNet takes no uneven map):
    a whole group with its key head, a removed head kept zeroed, or key heads copied for the kept value heads."""
    lm = _lm(tokenizer, **WIDE)
    shape = lm.grid.layers[0]
    assert (shape.kind, shape.heads, shape.kv_heads, shape.head_dim, shape.out_dim) == ("linear_attention", 8, 4, 8, 16)
    removed = parse_heads(heads)
    out_proj = lm.model.model.layers[0].linear_attn.out_proj
    columns = torch.cat([torch.arange(h.head * 16, (h.head + 1) * 16) for h in removed])
    hook = out_proj.register_forward_pre_hook(lambda module, args: (args[0].index_fill(-1, columns, 0.0),))
    try:
        want = _logits(lm.model)
    finally:
        hook.remove()
    assert float((want - _logits(lm.model)).abs().max()) > 1e-4  # the value heads matter
    with ablated(lm, removed):
        torch.testing.assert_close(_logits(lm.model), want, atol=0, rtol=0)
    plans = plan_layers(lm.grid, removed)  # maps allowed: a Gated DeltaNet layer is planned even all the same
    assert plans[0].layout == layout and not plans[0].kv_slots
    sliced = slice_model(lm, plans, removed)
    module = sliced.model.layers[0].linear_attn
    kept, keys = len(plans[0].q_heads), len(plans[0].kv_heads)
    assert (module.num_v_heads, module.num_k_heads, module.dt_bias.shape[0]) == (kept, keys, kept)
    assert module.in_proj_qkv.out_features == module.conv1d.out_channels == 2 * keys * 8 + kept * 16
    torch.testing.assert_close(_logits(sliced), want, atol=1e-5, rtol=1e-5)


def test_heads_are_named_by_their_layers_kind_and_count(tokenizer, tmp_path) -> None:
    """``L0.H7`` is value head 7 of the Gated DeltaNet layer 0 (8 value heads); attention layer 1 has 4 query heads,
    so ``L1.H7`` is refused in one line naming that layer's own count."""
    lm = _lm(tokenizer, **WIDE)
    evaluate(lm, choice_task(), heads=parse_heads("L0.H7,L1.H3"))
    with pytest.raises(HeadSpecError, match=r"layer 0 has 8 linear_attention heads \(H0..H7\)"):
        lm.grid.check(parse_heads("L0.H8"))
    folder = save_folder(lm.model, tokenizer, tmp_path / "m")
    task = tmp_path / "t.jsonl"
    task.write_text('{"prompt": "the film is", "choices": [" a", " b"], "answer": 0}\n')
    assert_refused(invoke("eval", str(folder), "--task", str(task), "--heads", "L1.H7"),
                   "head L1.H7 is out of range: layer 1 has 4 heads (H0..H3)")


def test_a_hybrid_decodes_greedily_under_the_ablation(tokenizer) -> None:
    """A hybrid's recurrent state takes every token it reads, so its answers are decoded plainly (no shared prompt
    prefix, no drafted tokens): the same texts and margins as the model with the heads' columns zeroed in its
    weights, with a few-shot prefix every prompt shares."""
    lm = _lm(tokenizer)
    assert lm.grid.recurrent
    heads = parse_heads("L0.H1,L1.H0,L1.H1")
    task = prefixed(generate_task())
    hooked = evaluate(lm, task, heads=heads)
    dense = evaluate(replace(lm, model=densify(lm, heads)), task)
    assert hooked.texts == dense.texts and hooked.texts != evaluate(lm, task).texts
    np.testing.assert_allclose(hooked.margins, dense.margins, atol=1e-4, rtol=0)


def test_a_sliced_export_is_pruned_again_with_its_gated_deltanet_parameters(tokenizer, tmp_path) -> None:
    """A sliced export (a Gated DeltaNet group gone with its key head, an attention head gone), exported again with a
    further value head: put back in its original shapes (dt_bias and A_log too), it computes the masked original
    with both sets removed."""
    lm = _lm(tokenizer, **WIDE)
    first, more = parse_heads("L0.H2,L0.H3,L1.H1"), parse_heads("L0.H6")
    export(lm, first, layout="sliced", verify_task=choice_task(), out=tmp_path / "s")
    with ablated(lm, (*first, *more)):
        want = _logits(lm.model)
    sliced = load_model(str(tmp_path / "s"), device="cpu")
    assert sliced.model.config.headprune["grid"][0]["kind"] == "linear_attention"
    record = export(sliced, more, layout="sliced", verify_task=choice_task(), out=tmp_path / "again")
    assert record.removed_heads == ("L0.H2", "L0.H3", "L0.H6", "L1.H1")
    again = load(tmp_path / "again", device="cpu").model
    torch.testing.assert_close(_logits(again), want, atol=1e-5, rtol=1e-5)
    kept = list(record.layers[0].q_heads)
    original = lm.model.model.layers[0].linear_attn
    assert torch.equal(again.model.layers[0].linear_attn.A_log, original.A_log[kept])


def test_onnx_of_a_hybrid_is_refused_in_one_line(tokenizer, tmp_path) -> None:
    """torch's ONNX exporter unrolls a Gated DeltaNet's scan for the length it traced (the graph then refuses any
    other length): refused before any work, naming what works (the MoE's; qwen3_5_text's decoder scans)."""
    folder = save_folder(_lm(tokenizer, "qwen3_5_moe_text").model, tokenizer, tmp_path / "m")
    assert_refused(invoke("export", str(folder), "--heads", "L0.H1", "--format", "onnx", "--out", str(tmp_path / "o")),
                   "its linear_attention layers carry a recurrent state")
    assert not (tmp_path / "o").exists()


def test_a_genai_decoder_whose_gated_deltanets_would_keep_different_heads_is_dense(tokenizer) -> None:
    """ONNX Runtime GenAI 0.18 gives every recurrent layer's states the first one's shape (measured: it refuses a
    second Gated DeltaNet's smaller ones), so a sliced qwen3_5_text decoder is written sliced only where every Gated
    DeltaNet keeps the same heads, and says why otherwise."""
    from headprune.exporter.formats.base import ExportOptions
    from headprune.exporter.formats.onnx import Onnx

    lm = _lm(tokenizer, num_hidden_layers=3, layer_types=["linear_attention"] * 2 + ["full_attention"])
    onnx = Onnx(ExportOptions(layout="sliced"))
    assert onnx.layout_for(lm, plan_layers(lm.grid, parse_heads("L0.H0,L0.H1"))) == "dense"
    assert onnx.layout_note == ("dense, not the sliced layout asked for, whose recurrent layers would keep [2, 4] "
                                "heads: ONNX Runtime GenAI gives every recurrent layer's states one shape")
    onnx = Onnx(ExportOptions(layout="sliced"))
    assert onnx.layout_for(lm, plan_layers(lm.grid, parse_heads("L0.H0,L0.H1,L1.H2,L1.H3"))) == "sliced"
    assert onnx.layout_note == ""


def _reorder_v_heads(tensor, dim, num_k_heads, num_v_per_k, head_dim):  # noqa: ANN001, ANN202
    """llama.cpp's converter, verbatim (``_LinearAttentionVReorderBase._reorder_v_heads``, b11549's
    ``conversion/qwen.py``, its LoRA branch left out)."""
    shape = list(tensor.shape)
    if dim < 0:
        dim += len(shape)
    new_shape = shape[:dim] + [num_k_heads, num_v_per_k, head_dim] + shape[dim + 1:]
    tensor = tensor.reshape(*new_shape)
    perm = list(range(len(new_shape)))
    perm[dim], perm[dim + 1] = perm[dim + 1], perm[dim]
    return tensor.permute(*perm).contiguous().reshape(*shape)


def test_gguf_writes_the_gated_deltanet_as_llama_cpps_converter_and_checks_q8_0_on_its_rounded_weights(
        tokenizer, tmp_path) -> None:
    """The GGUF file's Gated DeltaNet tensors are the converter's (value heads tiled, -exp(A_log), dt_bias as the
    ssm_dt bias, the kernel as (channels, kernel), which layers are recurrent), and a q8_0 file passes llama.cpp's gate
    against the reference rebuilt from its own de-quantised tensors (undone wrongly, that reference would be off by the
    weights' size)."""
    from helpers.gguf_file import gguf_knows, gguf_metadata

    from headprune.errors import UnsupportedModelError
    from headprune.exporter.formats.gguf import Gguf
    from headprune.loading.adapters.qwen3_5 import GatedDeltaNetTensors

    lm = _lm(tokenizer, **WIDE, linear_key_head_dim=16)
    if not gguf_knows("qwen35"):  # an older gguf-py (the floor): one line saying so, nothing written
        with pytest.raises(UnsupportedModelError, match="does not know llama.cpp's qwen35 architecture"):
            export(lm, "L0.H1", format="gguf", layout="dense", verify_task=generate_task(), out=tmp_path / "g")
        assert not (tmp_path / "g").exists()
        return
    export(lm, "L0.H1,L1.H0,L1.H1", format="gguf", layout="dense", verify_task=generate_task(), out=tmp_path / "g")
    reader, meta = gguf_metadata(tmp_path / "g" / "model.gguf")
    stored = {t.name: np.asarray(t.data) for t in reader.tensors}
    # the dense artifact: value head 1's out_proj columns zero
    net, config = densify(lm, parse_heads("L0.H1")).model.layers[0].linear_attn, lm.model.config
    value = net.in_proj_qkv.weight.detach()[2 * 4 * 16:]
    assert np.array_equal(stored["blk.0.attn_qkv.weight"][2 * 4 * 16:], _reorder_v_heads(value, 0, 4, 2, 16).numpy())
    assert np.array_equal(stored["blk.0.ssm_out.weight"],
                          _reorder_v_heads(net.out_proj.weight.detach(), 1, 4, 2, 16).numpy())
    assert np.allclose(stored["blk.0.ssm_a"], -_reorder_v_heads(net.A_log.detach()[:, None], 0, 4, 2, 1)[:, 0].exp())
    assert stored["blk.0.ssm_conv1d.weight"].shape == (net.conv1d.out_channels, 4)
    assert "blk.0.ssm_dt.bias" in stored and meta["qwen35.attention.recurrent_layers"] == [True, False]
    tensors = GatedDeltaNetTensors()  # and back, exactly: the lossy file's reference is rebuilt by it
    for name, tensor in lm.model.state_dict().items():
        _, data = tensors.to_llama_cpp(name, tensor.clone(), config)
        torch.testing.assert_close(tensors.from_llama_cpp(name, data, config).reshape(tensor.shape), tensor)
    record = export(lm, "L0.H1,L1.H0,L1.H1", format="gguf", layout="dense", gguf_type="q8_0",
                    verify_task=generate_task(), out=tmp_path / "q")
    assert Gguf.details(record).runtime.done and Gguf.details(record).runtime.mismatches == 0
    assert_refused(invoke("export", str(save_folder(_lm(tokenizer, "qwen3_5").model, tokenizer, tmp_path / "vl")),
                          "--heads", "L0.H1", "--format", "gguf", "--layout", "dense", "--out", str(tmp_path / "x")),
                   "its language model saved alone (qwen3_5_text")
