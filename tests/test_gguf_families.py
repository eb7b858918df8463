"""GGUF for the families llama.cpp's converter writes beyond Llama, Mistral and Qwen2/3 (tests/test_gguf.py): the
coverage matrix's tiny model of each, exported dense in llama.cpp's own architecture for it, run in llama.cpp itself
and compared with the masked original by its logits at every position; a sliced file, which llama.cpp's graph for the
family cannot take, is refused in one line naming what works.

Like test_gguf.py these need llama.cpp (``headprune[gguf]``) and fail without it. Where the installed gguf-py does not
know a family's architecture (its floor, 0.14, lacks qwen3moe), the export is refused in one line, not lost.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from helpers import choice_task, generate_task, matrix_heads, save_folder
from helpers.cli import invoke
from helpers.gguf_file import gguf_knows, gguf_metadata

from headprune.errors import UnsupportedModelError
from headprune.exporter import export, runtimes
from headprune.exporter.formats.gguf import GGUF_TOLERANCE, Gguf
from headprune.exporter.gguf.families import ENCODER_TYPES, FAMILIES
from headprune.heads import parse_heads
from headprune.loading.adapters import family_of
from headprune.loading.models import wrap_model
from headprune.surgery.ablation import ablated
from headprune.testing import family_model

HEADS = "L0.H1,L1.H0,L1.H1"  # one head of a group in layer 0; a whole key/value group in layer 1
# The families beyond test_gguf.py's, each with what its file must hold that a plain Llama file does not, and the
# variant of the matrix's tiny model llama.cpp's graph computes, as its family file declares them (Gguf.holds,
# Gguf.variant; the refusals of the others are tested below); a family whose sliced file is written (as deci, or in
# its own graph) is run in both layouts.
EXTRA = {t: (*f.holds, dict(f.variant)) for t, f in FAMILIES.items() if f.holds}


def test_every_gguf_family_is_run_in_llama_cpp_by_the_suite() -> None:
    """docs/models.md's GGUF column is gguf_families.FAMILIES: each is run here, in test_gguf.py or (the bare
    encoders) in test_gguf_encoders.py."""
    assert set(FAMILIES) == set(EXTRA) | {"llama", "mistral", "qwen2", "qwen3"} | set(ENCODER_TYPES)


def _lm(model_type: str, tokenizer, **changes):  # noqa: ANN001, ANN003, ANN202
    # llama.cpp sets attributes of Phi-3's own special tokens (</s>, <s>, ...) on a model whose name says phi3, and
    # the tests' tiny vocabulary has none of them: the tiny model goes by another name.
    return wrap_model(family_model(model_type, len(tokenizer), seed=2, **changes), tokenizer,
                      name=f"tiny-{model_type.replace('phi3', 'p3')}")


def file_against_masked(lm, heads, path, task) -> tuple[float, float, float]:  # noqa: ANN001
    """Largest |llama.cpp logits of the file - masked original's| at every position of every task prompt, the
    largest |masked logit - unmasked logit| (what removing the heads does, so the comparison can fail), and the
    largest |masked logit|."""
    diff = effect = scale = 0.0
    runner = runtimes.LlamaCppModel(path, n_ctx=128, eos=())
    try:
        for example in task.examples:
            ids = torch.tensor([lm.tokenizer(example.prompt or example.text)["input_ids"]])
            with torch.no_grad():
                whole = lm.model(input_ids=ids).logits[0].float()
                with ablated(lm, heads):
                    want = lm.model(input_ids=ids).logits[0].float()
            diff = max(diff, float((runner.logits(ids[0].tolist()) - want).abs().max()))
            effect = max(effect, float((want - whole).abs().max()))
            scale = max(scale, float(want.abs().max()))
    finally:
        runner.close()
    return diff, effect, scale


def _q8_0_or_refused(lm, arch: str, heads: str, out):  # noqa: ANN001, ANN202
    """A dense q8_0 GGUF export's record, or None where the installed gguf-py does not write ``arch`` (its floor):
    the export is then refused in one line saying so, and nothing is written."""
    if not gguf_knows(arch):
        with pytest.raises(UnsupportedModelError, match=f"does not know llama.cpp's {arch} architecture"):
            # (a choice task: on the floor's transformers a Falcon-H1 cannot generate, refused in a line of its own)
            export(lm, heads, format="gguf", layout="dense", verify_task=choice_task(), out=out, gguf_type="q8_0")
        assert not out.exists()
        return None
    return export(lm, heads, format="gguf", layout="dense", verify_task=generate_task(), out=out, gguf_type="q8_0")


@pytest.mark.parametrize("model_type", sorted(EXTRA))
def test_family_gguf_runs_in_llama_cpp_like_the_masked_original(model_type, tokenizer, tmp_path) -> None:
    tensor, key, changes = EXTRA[model_type]
    lm = _lm(model_type, tokenizer, **changes)
    if model_type == "gemma2":  # logits large enough (about 15) that Gemma 2's final soft cap (30) bends them
        with torch.no_grad():
            lm.model.model.norm.weight.add_(29.0)
    arch, heads = FAMILIES[model_type].arch_for(lm.model.config), matrix_heads(lm.grid)
    if not gguf_knows(arch):  # an older gguf-py: one line saying so, nothing written
        with pytest.raises(UnsupportedModelError, match=f"does not know llama.cpp's {arch} architecture|no llama.cpp "
                                                        "tensor for"):
            export(lm, heads, format="gguf", layout="dense", verify_task=choice_task(), out=tmp_path / "g")
        assert not (tmp_path / "g").exists()
        return
    record = export(lm, heads, format="gguf", layout="dense", verify_task=generate_task(), out=tmp_path / "g")
    info = Gguf.details(record)
    assert info.architecture == arch and info.runtime.done and info.runtime.mismatches == 0
    diff, effect, scale = file_against_masked(lm, parse_heads(heads), tmp_path / "g" / "model.gguf",
                                              generate_task())
    # GGUF's gate, or Gemma's (llama.cpp's float16 GELU table: 3.5e-4 of the largest logit measured here)
    tolerance = FAMILIES[model_type].tolerance or GGUF_TOLERANCE
    assert effect > 1e-3 and diff <= tolerance * max(1.0, scale), (diff, effect, scale)
    reader, meta = gguf_metadata(tmp_path / "g" / "model.gguf")
    assert tensor in {t.name for t in reader.tensors} and key in meta
    assert meta["general.architecture"] == arch
    if not FAMILIES[model_type].dense_only:  # sliced too: llama.cpp's deci, or the family's own graph where it
        # reads per-layer head counts (Gemma 4's; its layer 0 keeps H1 zeroed, as its readers' groups are even)
        per_layer = FAMILIES[model_type].per_layer
        # (a hybrid's layers without heads are skipped by the heads named and the counts read: matrix_heads)
        record = export(lm, heads, format="gguf", layout="sliced", verify_task=generate_task(), out=tmp_path / "s")
        info = Gguf.details(record)
        sliced = arch if per_layer else "deci"
        assert info.architecture == sliced and info.runtime.done and info.runtime.mismatches == 0
        diff, _, scale = file_against_masked(lm, parse_heads(heads), tmp_path / "s" / "model.gguf", generate_task())
        assert diff <= (tolerance if per_layer else GGUF_TOLERANCE) * max(1.0, scale), (diff, scale)
        meta = gguf_metadata(tmp_path / "s" / "model.gguf")[1]
        counts, kv = meta[f"{sliced}.attention.head_count"], meta[f"{sliced}.attention.head_count_kv"]
        assert [n for n, layer in zip(counts, lm.grid.layers) if layer.heads][:2] == [4, 2]
        assert all(n == 0 for n, layer in zip(kv, lm.grid.layers) if not layer.heads)  # (a Mamba2 layer's mark)


def test_mixture_of_experts_are_written_as_they_are(tokenizer, tmp_path) -> None:
    """Mixtral's experts in llama.cpp's stacked tensors: the gate and up halves of transformers' fused gate_up_proj
    and the down projections, each byte for byte the original's, and the router."""
    import numpy as np

    lm = _lm("mixtral", tokenizer)
    export(lm, HEADS, format="gguf", layout="dense", verify_task=generate_task(), out=tmp_path / "g")
    reader, _ = gguf_metadata(tmp_path / "g" / "model.gguf")
    stored = {t.name: np.asarray(t.data) for t in reader.tensors}
    experts = lm.model.model.layers[1].mlp.experts
    gate, up = experts.gate_up_proj.detach().chunk(2, dim=1)
    for name, want in (("gate_exps", gate), ("up_exps", up), ("down_exps", experts.down_proj.detach()),
                       ("gate_inp", lm.model.model.layers[1].mlp.gate.weight.detach())):
        assert np.array_equal(stored[f"blk.1.ffn_{name}.weight"], want.numpy()), name


def _task_file(tmp_path):  # noqa: ANN001, ANN202
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"prompt": "the film is", "target": "x"}) + "\n")
    return path


@pytest.mark.parametrize("model_type", ["mixtral", "phi3", "gpt2", "gpt_neox"])
def test_sliced_gguf_is_refused_naming_dense_and_other_formats(model_type, tokenizer, tmp_path) -> None:
    save_folder(_lm(model_type, tokenizer).model, tokenizer, tmp_path / "m")
    result = invoke("export", str(tmp_path / "m"), "--heads", HEADS, "--format", "gguf", "--verify-task",
                    str(_task_file(tmp_path)), "--out", str(tmp_path / "o"))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "one head count for every layer" in lines[0] and "--layout dense" in lines[0]
    assert "safetensors, onnx" in lines[0] and not (tmp_path / "o").exists()


def test_qwen3_moe_without_renormalised_routing_is_refused(tokenizer, tmp_path) -> None:
    """llama.cpp's qwen3moe graph always renormalises the chosen experts' weights: a checkpoint that does not
    (norm_topk_prob false) would compute other outputs there, so it is refused in one line."""
    model = family_model("qwen3_moe", len(tokenizer), seed=2)
    model.config.norm_topk_prob = False
    save_folder(model, tokenizer, tmp_path / "m")
    result = invoke("export", str(tmp_path / "m"), "--heads", HEADS, "--format", "gguf", "--layout", "dense",
                    "--verify-task", str(_task_file(tmp_path)), "--out", str(tmp_path / "o"))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "norm_topk_prob" in lines[0] and "safetensors, onnx" in lines[0] and not (tmp_path / "o").exists()


@pytest.mark.parametrize("model_type", ["mixtral", "gpt2"])
def test_k_quants_of_these_families_are_refused_naming_the_types_written(model_type, tokenizer, tmp_path) -> None:
    """llama.cpp's quantizer picks a fused attn_qkv's or an expert's K-quant type by rules headprune does not
    reproduce: refused in one line (the float and q8_0 types are written, as above)."""
    save_folder(_lm(model_type, tokenizer).model, tokenizer, tmp_path / "m")
    result = invoke("export", str(tmp_path / "m"), "--heads", HEADS, "--format", "gguf", "--layout", "dense",
                    "--gguf-type", "q4_k_m", "--verify-task", str(_task_file(tmp_path)), "--out", str(tmp_path / "o"))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "q8_0" in lines[0] and "llama-quantize" in lines[0] and not (tmp_path / "o").exists()


@pytest.mark.parametrize("model_type", ["mixtral", "gpt_oss"])
def test_a_lossy_mixture_of_experts_file_is_checked_on_its_own_rounded_experts(model_type, tokenizer, tmp_path) -> None:
    """A q8_0 file: the torch reference of its gate is rebuilt from the file's de-quantised tensors, the experts'
    stacked gate and up tensors joined back into transformers' fused gate_up_proj (GPT-OSS: columns alternating)."""
    from headprune.exporter.gguf import writer as gguf_export
    from headprune.exporter.gguf.quant_check import with_stored

    lm = _lm(model_type, tokenizer)
    record = _q8_0_or_refused(lm, FAMILIES[model_type].arch, HEADS, tmp_path / "g")  # (the floor lacks gpt-oss)
    if record is None:
        return
    assert Gguf.details(record).quantized is not None
    (tmp_path / "w").mkdir()
    written = gguf_export.write_files(lm, lm.model, FAMILIES[model_type].arch, None, tmp_path / "w", tmp_path / "w",
                                      "q8_0", with_original=False)
    rounded = with_stored(lm.model, written.plan, written.stored)
    fused = rounded.model.layers[1].mlp.experts.gate_up_proj.detach()
    original = lm.model.model.layers[1].mlp.experts.gate_up_proj.detach()
    assert 0 < float((fused - original).abs().max()) < 1e-2 * float(original.abs().max())


def test_a_lossy_latent_attention_file_is_checked_on_its_own_rounded_key_value_expansion(tokenizer, tmp_path) -> None:
    """A q8_0 DeepSeek-V3 file: kv_b_proj, stored as llama.cpp's attn_k_b (transposed) and attn_v_b, is joined back
    from the file's de-quantised tensors for the gate's torch reference, which then runs like the file."""
    from headprune.exporter.gguf import writer as gguf_export
    from headprune.exporter.gguf.quant_check import with_stored

    lm = _lm("deepseek_v3", tokenizer)
    record = _q8_0_or_refused(lm, "deepseek2", HEADS, tmp_path / "g")
    if record is None:
        return
    assert Gguf.details(record).quantized is not None and Gguf.details(record).runtime.mismatches == 0
    (tmp_path / "w").mkdir()
    written = gguf_export.write_files(lm, lm.model, "deepseek2", None, tmp_path / "w", tmp_path / "w", "q8_0",
                                      with_original=False)
    rounded = with_stored(lm.model, written.plan, written.stored)
    joined = rounded.model.layers[1].self_attn.kv_b_proj.weight.detach()
    original = lm.model.model.layers[1].self_attn.kv_b_proj.weight.detach()
    assert 0 < float((joined - original).abs().max()) < 1e-2 * float(original.abs().max())


@pytest.mark.parametrize(("model_type", "changes", "words"), [
    ("gemma2", {}, "query_pre_attn_scalar (256) is not its head size (16)"),
    ("gemma3_text", {"query_pre_attn_scalar": 16, "layer_types": ["full_attention", "sliding_attention"]},
     "every 6th layer global"),
    ("olmoe", {}, "groups key/value heads"),
    ("cohere", {}, "64 layers or more"),
    ("smollm3", {"num_hidden_layers": 4, "no_rope_layers": [1, 1, 0, 1]}, "every 4th"),
    ("gpt2", {"scale_attn_by_inverse_layer_idx": True}, "which llama.cpp's gpt2 graph fixes"),
    ("gemma4_text", {"num_kv_shared_layers": 1}, "key/value-sharing layers read other layers"),
    ("gpt_neox", {"attention_bias": False}, "no biases (attention_bias false)"),
    ("gpt2", {"activation_function": "relu"}, "needs a gelu_new or gelu_pytorch_tanh or gelu_fast MLP"),
    ("qwen3", {"rope_parameters": {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 32}},
     "only llama.cpp's llama, deci"),
    ("deepseek_v32", {}, "have no deepseek32 architecture"),  # (gguf-py 0.19 lacks it)
] + [(t, dict(f.refused[0]), f.refused[1]) for t, f in FAMILIES.items() if f.refused])  # as family files declare
def test_configs_llama_cpp_computes_otherwise_are_refused(model_type, changes, words, tokenizer, tmp_path) -> None:
    """What llama.cpp's graph for a family fixes (Gemma's query scale and global-layer pattern, OLMoE's ungrouped
    key/value heads, Command R+'s q/k norms only at 64 layers or more, Llama 3.1's RoPE factors only in its llama
    graph, and what each family file declares: Gguf.refused) is refused in one line when a config differs."""
    lm = _lm(model_type, tokenizer, **changes)
    save_folder(lm.model, tokenizer, tmp_path / "m")
    result = invoke("export", str(tmp_path / "m"), "--heads", matrix_heads(lm.grid), "--format", "gguf", "--layout",
                    "dense", "--verify-task", str(_task_file(tmp_path)), "--out", str(tmp_path / "o"))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert words in lines[0] and "safetensors, onnx" in lines[0] and not (tmp_path / "o").exists()


def test_command_r_plus_q_k_norms_run_in_llama_cpp(tokenizer, tmp_path) -> None:
    """Command R+'s per-head q/k norms, which llama.cpp's command-r graph reads in a model of 64 layers or more."""
    lm = _lm("cohere", tokenizer, num_hidden_layers=64)
    with torch.no_grad():  # norms that do something (they start as ones)
        for layer in lm.adapter.layers(lm.model):
            layer.self_attn.q_norm.weight.normal_(1.0, 0.5)
            layer.self_attn.k_norm.weight.normal_(1.0, 0.5)
    if not gguf_knows("command-r"):
        pytest.fail("gguf-py knows command-r from its floor up")
    record = export(lm, HEADS, format="gguf", layout="dense", verify_task=generate_task(), out=tmp_path / "g")
    assert Gguf.details(record).runtime.mismatches == 0
    diff, effect, scale = file_against_masked(lm, parse_heads(HEADS), tmp_path / "g" / "model.gguf", generate_task())
    assert effect > 1e-3 and diff <= GGUF_TOLERANCE * max(1.0, scale), (diff, effect, scale)
    reader, _ = gguf_metadata(tmp_path / "g" / "model.gguf")
    assert "blk.63.attn_k_norm.weight" in {t.name for t in reader.tensors}


def test_phi4_mini_longrope_and_partial_rotation_run_in_llama_cpp(tokenizer, tmp_path) -> None:
    """Phi-3.5 and Phi-4-mini's LongRoPE (llama.cpp's rope_factors_long/_short and its attention factor), with
    Phi-4-mini's rotation of three quarters of each head, against the masked original in llama.cpp."""
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "partial_rotary_factor": 0.75,
            "short_factor": [1.0, 1.2, 1.5, 2.0, 3.0, 4.0], "long_factor": [2.0, 3.0, 5.0, 8.0, 12.0, 16.0],
            "original_max_position_embeddings": 1024}  # above the contexts llama.cpp is run with here: short factors
    lm = _lm("phi3", tokenizer, rope_parameters=rope, original_max_position_embeddings=1024,
             max_position_embeddings=4096)
    record = export(lm, HEADS, format="gguf", layout="dense", verify_task=generate_task(), out=tmp_path / "g")
    info = Gguf.details(record)
    assert info.runtime.mismatches == 0 and any("LongRoPE" in note for note in info.notes)
    diff, effect, scale = file_against_masked(lm, parse_heads(HEADS), tmp_path / "g" / "model.gguf", generate_task())
    assert effect > 1e-3 and diff <= GGUF_TOLERANCE * max(1.0, scale), (diff, effect, scale)
    reader, meta = gguf_metadata(tmp_path / "g" / "model.gguf")
    assert {"rope_factors_long.weight", "rope_factors_short.weight"} <= {t.name for t in reader.tensors}
    assert meta["phi3.rope.dimension_count"] == 12 and meta["phi3.rope.scaling.attn_factor"] > 1.0


@pytest.mark.parametrize(("model_type", "alone"), [("gemma3", "gemma3_text"), ("llava", "llama"), ("qwen2_vl", None)])
def test_vision_language_models_as_shipped_are_refused_naming_what_works(model_type, alone, tokenizer,
                                                                         tmp_path) -> None:
    """Gemma 3, LLaVA and Qwen2-VL with their vision tower: llama.cpp reads the tower from an mmproj file headprune
    does not write; the line names the formats that keep it and, where GGUF export takes it, the language model."""
    save_folder(family_model(model_type, len(tokenizer), seed=1), tokenizer, tmp_path / "m")
    result = invoke("export", str(tmp_path / "m"), "--heads", HEADS, "--format", "gguf", "--layout", "dense",
                    "--verify-task", str(_task_file(tmp_path)), "--out", str(tmp_path / "o"))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "mmproj" in lines[0] and "exported as safetensors, onnx" in lines[0]
    assert (f"its language model saved alone ({alone}," in lines[0]) if alone else "saved alone" not in lines[0]
    assert not (tmp_path / "o").exists()


# (OLMo-2, OLMoE and OLMo 3 are dense only in every format: their q/k norms span all heads)
@pytest.mark.parametrize("model_type", sorted(t for t, f in FAMILIES.items() if f.dense_only and t in EXTRA
                                              and not family_of(t).adapter.dense_only))
def test_dense_only_graphs_refuse_per_layer_head_counts(model_type, tokenizer, tmp_path) -> None:
    """Why these families are dense only: llama.cpp's loader takes per-layer head_count/head_count_kv arrays for
    every architecture, but each of these graphs sizes layer N's tensors by layer 0's counts, so a sliced file (layer
    1 with half its heads) does not load in llama.cpp itself."""
    from headprune.exporter.gguf import writer as gguf_export
    from headprune.exporter.llama_cpp import runtime as llama_cpp_runtime
    from headprune.surgery.plan import plan_layers
    from headprune.surgery.slicing import slice_model

    family = FAMILIES[model_type]
    lm = _lm(model_type, tokenizer, **EXTRA[model_type][2])
    removed = parse_heads("L1.H0,L1.H1")
    plans = plan_layers(lm.grid, removed)
    artifact = slice_model(lm, plans, removed)
    attention = [layer.kind == "attention" for layer in lm.grid.layers]  # (a hybrid's other layers count none)
    stock = gguf_export.gguf_plan(lm, family.arch, plans)  # (a latent attention's one key/value head a layer kept)
    plan = replace(stock, head_count=tuple(len(p.q_heads) if a else 0 for p, a in zip(plans, attention)),
                   head_count_kv=stock.head_count_kv if family.latent else
                   tuple(len(p.kv_heads) if a else 0 for p, a in zip(plans, attention)))
    if not gguf_knows(family.arch):
        with pytest.raises(UnsupportedModelError, match="does not know llama.cpp's|no llama.cpp tensor for"):
            gguf_export.gguf_tensors(artifact, plan)
        return
    write, _, _ = gguf_export.tokenizer_writer(lm, lm.model.config.vocab_size, tmp_path)
    gguf_export.write_gguf(tmp_path / "x.gguf", artifact, plan, gguf_export.gguf_tensors(artifact, plan), write,
                           name="x", gguf_type="f32")
    with pytest.raises(ValueError, match=r"tensor 'blk\.1\.attn_(q|qkv|q_b)\.weight' has wrong shape"):
        llama_cpp_runtime.LlamaCpp(tmp_path / "x.gguf", n_ctx=32)


_FULL_ROTATION = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1.0}


@pytest.mark.parametrize(("model_type", "changes", "keys"), [
    ("gpt_neox", {"use_parallel_residual": False, "tie_word_embeddings": True, "rope_parameters": _FULL_ROTATION},
     {"gptneox.use_parallel_residual": False, "gptneox.rope.dimension_count": 16}),
    ("gpt2", {"tie_word_embeddings": False}, {}),
])
def test_gpt_variants_run_in_llama_cpp(model_type, changes, keys, tokenizer, tmp_path) -> None:
    """The other variants llama.cpp's gpt2 and gptneox graphs compute: GPT-NeoX with attention then MLP
    (use_parallel_residual false), every head dimension rotated and tied embeddings (the graph reads its own output
    matrix, so the file holds one); GPT-2 with an output matrix of its own."""
    lm = _lm(model_type, tokenizer, **changes)
    record = export(lm, HEADS, format="gguf", layout="dense", verify_task=generate_task(), out=tmp_path / "g")
    assert Gguf.details(record).runtime.mismatches == 0
    diff, effect, scale = file_against_masked(lm, parse_heads(HEADS), tmp_path / "g" / "model.gguf", generate_task())
    assert effect > 1e-3 and diff <= FAMILIES[model_type].tolerance * max(1.0, scale), (diff, effect, scale)
    reader, meta = gguf_metadata(tmp_path / "g" / "model.gguf")
    assert "output.weight" in {t.name for t in reader.tensors}
    assert all(meta[key] == value for key, value in keys.items()), {key: meta[key] for key in keys}


def test_fused_layouts_are_the_converters() -> None:
    """GPT-NeoX's per-head q/k/v rows regrouped as llama.cpp's converter does (GPTNeoXModel.modify_tensors, verbatim
    below), GPT-2's Conv1D weights transposed, and each undone exactly for a lossy file's check."""
    from headprune.surgery.remote_modeling import qkv_layout

    neox, gpt2 = qkv_layout("neox"), qkv_layout("gpt2")
    n_head, n_embed = 4, 32
    weight, bias = torch.randn(3 * n_embed, n_embed), torch.randn(3 * n_embed)
    qkv_weights = weight.reshape((n_head, 3, n_embed // n_head, n_embed))
    want = torch.cat((qkv_weights[:, 0, :, :].reshape((-1, n_embed)), qkv_weights[:, 1, :, :].reshape((-1, n_embed)),
                      qkv_weights[:, 2, :, :].reshape((-1, n_embed))), dim=0)
    qkv_bias = bias.reshape((n_head, 3, n_embed // n_head))
    want_bias = torch.cat((qkv_bias[:, 0, :].reshape((n_embed,)), qkv_bias[:, 1, :].reshape((n_embed,)),
                           qkv_bias[:, 2, :].reshape((n_embed,))), dim=0)
    name = "gpt_neox.layers.0.attention.query_key_value"
    assert torch.equal(neox.to_llama_cpp(f"{name}.weight", weight, n_embed // n_head), want)
    assert torch.equal(neox.to_llama_cpp(f"{name}.bias", bias, n_embed // n_head), want_bias)
    assert torch.equal(neox.from_llama_cpp(f"{name}.weight", want, n_embed // n_head), weight)
    conv = torch.randn(n_embed, 3 * n_embed)  # GPT-2's c_attn: (in, out)
    assert torch.equal(gpt2.to_llama_cpp("transformer.h.0.attn.c_attn.weight", conv, 8), conv.T)
    assert torch.equal(gpt2.to_llama_cpp("transformer.h.0.attn.c_attn.bias", bias, 8), bias)
    assert torch.equal(gpt2.from_llama_cpp("transformer.h.0.mlp.c_proj.weight", conv.T, 8), conv)


@pytest.mark.parametrize(("model_type", "fused"), [("gpt2", "transformer.h.1.attn.c_attn.weight"),
                                                   ("gpt_neox", "gpt_neox.layers.1.attention.query_key_value.weight")])
def test_a_lossy_gpt_file_is_checked_on_its_own_rounded_weights(model_type, fused, tokenizer, tmp_path) -> None:
    """A q8_0 file of GPT-2 or GPT-NeoX: gated in llama.cpp on its float32 file, the torch reference rebuilt from the
    file's de-quantised tensors put back in the model's layout (a layout wrong there would be off by the weights'
    own size, not by q8_0's rounding)."""
    from headprune.exporter.gguf import writer as gguf_export
    from headprune.exporter.gguf.quant_check import with_stored

    lm = _lm(model_type, tokenizer)
    record = export(lm, HEADS, format="gguf", layout="dense", verify_task=generate_task(), out=tmp_path / "g",
                    gguf_type="q8_0")
    assert Gguf.details(record).quantized is not None and Gguf.details(record).runtime.mismatches == 0
    (tmp_path / "w").mkdir()
    written = gguf_export.write_files(lm, lm.model, FAMILIES[model_type].arch, None, tmp_path / "w", tmp_path / "w",
                                      "q8_0", with_original=False)
    rounded = with_stored(lm.model, written.plan, written.stored).state_dict()
    for name in (fused, "lm_head.weight"):
        original = lm.model.state_dict()[name]
        assert 0 < float((rounded[name] - original).abs().max()) < 1e-2 * float(original.abs().max()), name


def test_nemotron_h_with_experts_runs_in_llama_cpp_as_nemotron_h_moe(tokenizer, tmp_path) -> None:
    """Nemotron 3 Nano's layers of experts (a shared expert beside them, sigmoid routing with a correction bias):
    llama.cpp's nemotron_h_moe graph, sliced, against the masked original."""
    lm = _lm("nemotron_h", tokenizer, layers_block_type=["linear_attention", "full_attention", "moe", "full_attention"],
             n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
             moe_shared_expert_intermediate_size=32)
    with torch.no_grad():  # a correction bias that changes which experts are chosen (it starts as zeros)
        lm.model.model.layers[2].mixer.gate.e_score_correction_bias.normal_(0.0, 0.5)
    heads = matrix_heads(lm.grid)
    if not gguf_knows("nemotron_h_moe"):  # an older gguf-py: one line saying so, nothing written
        with pytest.raises(UnsupportedModelError, match="does not know llama.cpp's nemotron_h_moe architecture"):
            export(lm, heads, format="gguf", layout="sliced", verify_task=generate_task(), out=tmp_path / "g")
        return
    record = export(lm, heads, format="gguf", layout="sliced", verify_task=generate_task(), out=tmp_path / "g")
    assert Gguf.details(record).architecture == "nemotron_h_moe" and Gguf.details(record).runtime.mismatches == 0
    diff, effect, scale = file_against_masked(lm, parse_heads(heads), tmp_path / "g" / "model.gguf", generate_task())
    assert effect > 1e-3 and diff <= GGUF_TOLERANCE * max(1.0, scale), (diff, effect, scale)
    reader, meta = gguf_metadata(tmp_path / "g" / "model.gguf")
    assert {"blk.2.ffn_up_exps.weight", "blk.2.exp_probs_b.bias"} <= {t.name for t in reader.tensors}
    assert meta["nemotron_h_moe.expert_count"] == 4


@pytest.mark.parametrize("model_type", ["granitemoehybrid", "nemotron_h", "lfm2", "falcon_h1"])
def test_a_q8_0_hybrid_keeps_its_state_tensors_float32_and_passes_the_gate(model_type, tokenizer, tmp_path) -> None:
    """llama.cpp's Mamba2 scan and convolutions take float32 A, D and kernels only (a q8_0 file with them rounded
    aborted the process, measured): they stay float32, as the converter keeps them, and the file passes the gate."""
    import numpy as np

    lm = _lm(model_type, tokenizer)
    record = _q8_0_or_refused(lm, FAMILIES[model_type].arch_for(lm.model.config), matrix_heads(lm.grid),
                              tmp_path / "g")
    if record is None:
        return
    info = Gguf.details(record)
    assert info.gguf_type == "q8_0" and info.runtime.done and info.runtime.mismatches == 0
    reader, _ = gguf_metadata(tmp_path / "g" / info.file)
    state = [t for t in reader.tensors if t.name.endswith((".ssm_a", ".ssm_d", ".ssm_conv1d.weight",
                                                           ".shortconv.conv.weight"))]
    assert state and all(t.data.dtype == np.float32 for t in state)
