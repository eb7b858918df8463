"""Checkpoints as shipped: FP8 block-quantized weights and MXFP4 experts are read dequantized by transformers' own
quantizers (said in one line), and an export writes the checkpoint's own quantized bytes back wherever the pruned
tensor is made of them (FP8: whole 128 x 128 blocks; MXFP4: the experts, which are never touched), the rest in the
dtype loaded; tensors a class drops by design (multi-token prediction) are written through. Each export is loaded
back by headprune and by stock transformers and compared with the masked original by logits, and its stored
tensors are checked byte for byte against the checkpoint's."""

from __future__ import annotations

import json
import logging

import pytest
import torch
import transformers
from safetensors import safe_open

from helpers import SMALL, build_tokenizer, choice_task, random_choice_task, save_folder
from helpers.cli import assert_refused, invoke
from helpers.extras import needs
from helpers.quantized import BLOCK, fp8_blocks, quantize_compressed_fp8, quantize_fp8, quantize_mxfp4
from headprune.errors import UnsupportedModelError
from headprune.exporter import export, verify_record
from headprune.heads import parse_heads
from headprune.loading.models import load, load_model
from headprune.report.markdown import render_markdown
from headprune.search.find import find
from headprune.surgery.ablation import ablated
from headprune.testing import family_model

HEADS = "L0.H1,L1.H0,L1.H1"  # one head of a key/value group in layer 0, a whole group in layer 1
IDS = torch.tensor([[5, 9, 14, 3, 27, 8, 11], [0, 0, 0, 7, 19, 4, 2]])
MASK = torch.tensor([[1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1]])


def _logits(model) -> torch.Tensor:  # noqa: ANN001
    with torch.no_grad():
        return model(input_ids=IDS, attention_mask=MASK, position_ids=(MASK.cumsum(-1) - 1).clamp(min=0)).logits[
            MASK.bool()].float()


def _stored(folder) -> dict[str, torch.Tensor]:  # noqa: ANN001
    out = {}
    for path in folder.glob("*.safetensors"):
        with safe_open(path, framework="pt") as handle:
            out.update({name: handle.get_tensor(name) for name in handle.keys()})
    return out


def _bytes(tensor: torch.Tensor) -> bytes:
    return tensor.contiguous().view(-1).view(torch.uint8).numpy().tobytes()


def _fp8_folder(tmp_path, head_dim: int, **extra):  # noqa: ANN001, ANN202
    """A two-layer Qwen3 (4 query heads of ``head_dim`` over 2 key/value heads) saved FP8 block-quantized."""
    tokenizer = build_tokenizer()
    torch.manual_seed(3)
    config = transformers.Qwen3Config(vocab_size=len(tokenizer), hidden_size=256, intermediate_size=256,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=head_dim, max_position_embeddings=1024, tie_word_embeddings=False)
    folder = save_folder(transformers.Qwen3ForCausalLM(config), tokenizer, tmp_path / f"fp8-{head_dim}")
    return quantize_fp8(folder, **extra)


def _own_dequantization(quantized: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """The FP8 block format by its definition (not transformers' code): each 128 x 128 block times its scale."""
    expanded = scales.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
    return quantized.float() * expanded[:quantized.shape[0], :quantized.shape[1]]


def test_fp8_is_read_dequantized_and_says_so(tmp_path, caplog) -> None:
    folder = _fp8_folder(tmp_path, 128)
    stored = _stored(folder)
    with caplog.at_level(logging.INFO, logger="headprune"):
        lm = load_model(str(folder), device="cpu")
    q = lm.quantization
    assert q.method == "fp8" and q.read_as == "float32" and len(q.weights) == 14  # 7 projections x 2 layers
    assert f"read FP8 block-quantized (fp8): its 14 quantized weights" in caplog.text
    state = lm.model.state_dict()
    for name in q.weights:  # float32 holds fp8 x scale exactly: the format's own definition, to the bit
        assert torch.equal(state[name], _own_dequantization(stored[name], stored[name + "_scale_inv"]))
    result = invoke("eval", str(folder), "--task", "sentiment", "--limit", "8", "--heads", "L0.H1", "--json")
    assert result.exit_code == 0, result.output
    assert "read FP8 block-quantized (fp8)" in result.stderr and "dequantized to float32" in result.stderr
    found = find(lm, random_choice_task(40), **SMALL, screen="exact", extend=0)  # the result and report say it too
    assert found.model.quantization == q.line() and q.line() in render_markdown(found)


@pytest.mark.parametrize("layout", ["sliced", "dense"])
def test_fp8_export_keeps_the_checkpoints_blocks(tmp_path, layout) -> None:
    folder = _fp8_folder(tmp_path, 128)
    stored, heads = _stored(folder), parse_heads(HEADS)
    lm = load_model(str(folder), dtype="checkpoint", device="cpu")  # bfloat16, as export reads it
    with ablated(lm, heads):
        want = _logits(lm.model)
    record = export(str(folder), HEADS, layout=layout, verify_task=choice_task(), out=tmp_path / layout)
    verify_record(tmp_path / layout)
    q = record.quantization
    assert (q.method, q.read_as, q.weights, q.unquantized) == ("fp8", "bfloat16", 14, ())
    assert (q.sliced, q.zeroed) == ((6, 0) if layout == "sliced" else (0, 2))  # q/k/v/o of 2 layers; o of 2 layers
    written = _stored(tmp_path / layout)
    config = json.loads((tmp_path / layout / "config.json").read_text())
    assert config["quantization_config"] == json.loads((folder / "config.json").read_text())["quantization_config"]
    for name in lm.quantization.weights:
        weight, scale = written[name], written[name + "_scale_inv"]
        assert weight.dtype == torch.float8_e4m3fn and scale.dtype == torch.float32
        original, blocks = stored[name], stored[name + "_scale_inv"]
        if ".self_attn." not in name or (layout == "dense" and "o_proj" not in name):
            assert _bytes(weight) == _bytes(original) and _bytes(scale) == _bytes(blocks)
    # Layer 1 lost key/value group 0 (query heads 0 and 1): its k/v keep their second block of rows, q its last two,
    # o its last two blocks of columns, with those blocks' scales; layer 0 keeps q heads 0, 2, 3 and o's columns.
    expect = {"model.layers.1.self_attn.k_proj.weight": (0, [1]), "model.layers.1.self_attn.q_proj.weight": (0, [2, 3]),
              "model.layers.1.self_attn.o_proj.weight": (1, [2, 3]), "model.layers.0.self_attn.q_proj.weight": (0, [0, 2, 3]),
              "model.layers.0.self_attn.o_proj.weight": (1, [0, 2, 3])}
    for name, (axis, kept) in expect.items():
        original, blocks = stored[name].view(torch.uint8), stored[name + "_scale_inv"]
        if layout == "sliced":
            rows = torch.cat([torch.arange(b * BLOCK, (b + 1) * BLOCK) for b in kept])
            assert _bytes(written[name]) == _bytes(original.index_select(axis, rows))
            assert torch.equal(written[name + "_scale_inv"], blocks.index_select(axis, torch.tensor(kept)))
        elif "o_proj" in name:  # the removed heads' columns are 0 in FP8, under the original scales
            gone = [h for h in range(4) if h not in kept]
            zeroed = original.clone()
            for head in gone:
                zeroed[:, head * BLOCK:(head + 1) * BLOCK] = 0
            assert _bytes(written[name]) == _bytes(zeroed) and torch.equal(written[name + "_scale_inv"], blocks)
    stock = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / layout, trust_remote_code=layout == "sliced")
    exact = layout == "dense"  # dequantized, the weights are the masked original's; sliced shapes sum in another order
    for model in (load(tmp_path / layout, device="cpu").model, stock):
        assert model.dtype == torch.bfloat16
        torch.testing.assert_close(_logits(model), want, atol=0 if exact else 2e-2, rtol=0 if exact else 2e-2)


def test_fp8_heads_that_split_a_block_are_written_unquantized(tmp_path) -> None:
    folder = _fp8_folder(tmp_path, 64)  # two heads a block: removing one leaves half a block
    lm = load_model(str(folder), dtype="checkpoint", device="cpu")
    with ablated(lm, parse_heads(HEADS)):
        want = _logits(lm.model)
    result = invoke("export", str(folder), "--heads", HEADS, "--out", str(tmp_path / "o"), "--verify-task",
                    "sentiment", "--verify-limit", "8")
    assert result.exit_code == 0, result.output
    # Layer 0 loses head 1 (half of q's first block, of o's first block of columns); layer 1 loses q's first block
    # whole but half of k's and v's (one 64-row key/value head).
    unquantized = ["model.layers.0.self_attn.o_proj", "model.layers.0.self_attn.q_proj",
                   "model.layers.1.self_attn.k_proj", "model.layers.1.self_attn.v_proj"]
    line = [line for line in result.output.splitlines() if line.startswith("quantization:")]
    assert len(line) == 1 and "10 of 14 quantized weights" in line[0] and "4 written in bfloat16" in line[0]
    config = json.loads((tmp_path / "o" / "config.json").read_text())["quantization_config"]
    assert config["modules_to_not_convert"] == ["lm_head", *unquantized]
    written, pruned = _stored(tmp_path / "o"), load(tmp_path / "o", device="cpu")
    for module in unquantized:  # the very values the masked original ran on
        assert written[module + ".weight"].dtype == torch.bfloat16 and module + ".weight_scale_inv" not in written
        assert torch.equal(written[module + ".weight"], pruned.model.state_dict()[module + ".weight"])
    assert written["model.layers.1.self_attn.q_proj.weight"].dtype == torch.float8_e4m3fn
    assert "written in bfloat16" in (tmp_path / "o" / "README.md").read_text()
    torch.testing.assert_close(_logits(pruned.model), want, atol=2e-2, rtol=2e-2)


def test_fp8_deepseek_v3_keeps_the_blocks_of_its_latent_heads(tmp_path) -> None:
    """DeepSeek-V3 as shipped (FP8, its head widths): a head's 192 query rows split q_b_proj's 128-row blocks, its 256
    kv_b_proj rows and 128 o_proj columns are whole blocks. Layer 0 loses head 1 (q_b_proj written in bfloat16),
    layer 1 heads 0 and 1 (rows 0-383 of q_b_proj: three whole blocks)."""
    tokenizer = build_tokenizer()
    torch.manual_seed(3)
    config = transformers.DeepseekV3Config(
        vocab_size=len(tokenizer), hidden_size=256, intermediate_size=256, moe_intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=128, kv_lora_rank=128,
        qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, n_routed_experts=4, num_experts_per_tok=2,
        n_shared_experts=1, first_k_dense_replace=1, n_group=2, topk_group=1, max_position_embeddings=256,
        tie_word_embeddings=False)
    folder = quantize_fp8(save_folder(transformers.DeepseekV3ForCausalLM(config), tokenizer, tmp_path / "m"))
    lm = load_model(str(folder), dtype="checkpoint", device="cpu")
    with ablated(lm, parse_heads(HEADS)):
        want = _logits(lm.model)
    record = export(str(folder), HEADS, layout="sliced", verify_task=choice_task(), out=tmp_path / "s")
    q = record.quantization
    assert (q.unquantized, q.sliced) == (("model.layers.0.self_attn.q_b_proj",), 5)  # kv_b, o; q_b, kv_b, o
    written = _stored(tmp_path / "s")
    assert written["model.layers.0.self_attn.q_b_proj.weight"].dtype == torch.bfloat16
    for name in ("layers.0.self_attn.kv_b_proj", "layers.0.self_attn.o_proj", "layers.1.self_attn.q_b_proj"):
        assert written[f"model.{name}.weight"].dtype == torch.float8_e4m3fn
    stock = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "s", trust_remote_code=True)
    for model in (load(tmp_path / "s", device="cpu").model, stock):
        torch.testing.assert_close(_logits(model), want, atol=2e-2, rtol=2e-2)


def test_fp8_shards_list_the_scales(tmp_path) -> None:
    folder = _fp8_folder(tmp_path, 128)
    record = export(str(folder), "L1.H0", layout="dense", out=tmp_path / "o", max_shard_size="600KB")
    index = json.loads((tmp_path / "o" / "model.safetensors.index.json").read_text())
    files = {path.name for path in (tmp_path / "o").glob("*.safetensors")}
    assert len(files) > 1 and set(index["weight_map"].values()) == files
    assert "model.layers.1.self_attn.o_proj.weight_scale_inv" in index["weight_map"]
    assert record.verification.logits.max_abs_diff == 0


def test_fp8_scales_under_other_names_make_a_plain_export(tmp_path) -> None:
    """Mistral Large 4 keeps its scales as ``.qscale_weight``, which transformers renames on load where it knows the
    name; headprune does not pair them, so the export is a plain checkpoint of the values loaded, and says so."""
    from safetensors.torch import save_file

    folder = _fp8_folder(tmp_path, 128)
    stored = {name.replace(".weight_scale_inv", ".qscale_weight") if ".mlp." in name else name: tensor
              for name, tensor in _stored(folder).items()}
    save_file(stored, folder / "model.safetensors", metadata={"format": "pt"})
    _, info = transformers.AutoModelForCausalLM.from_pretrained(folder, output_loading_info=True)
    if info["unexpected_keys"]:  # a transformers that does not know the name (5.17): refused, as it leaves them out
        with pytest.raises(UnsupportedModelError, match="not used by Qwen3ForCausalLM"):
            load_model(str(folder), device="cpu")
        return
    lm = load_model(str(folder), dtype="checkpoint", device="cpu")
    assert len(lm.quantization.unpaired) == 6 and len(lm.quantization.weights) == 8  # mlp: 3 a layer; attention
    with ablated(lm, parse_heads("L1.H0")):
        want = _logits(lm.model)
    record = export(lm, "L1.H0", layout="dense", out=tmp_path / "o")
    assert record.quantization.unquantized == lm.quantization.weights and "plain checkpoint" in record.quantization.why
    assert "quantization_config" not in json.loads((tmp_path / "o" / "config.json").read_text())
    assert not any(t.dtype == torch.float8_e4m3fn for t in _stored(tmp_path / "o").values())
    torch.testing.assert_close(_logits(transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "o")), want,
                               atol=0, rtol=0)


def _mtp_like_qwen35(monkeypatch) -> None:  # noqa: ANN001
    """Qwen3's class dropping ``mtp.*`` on load, as Qwen3.5's and Qwen3-Next's classes declare."""
    monkeypatch.setattr(transformers.Qwen3ForCausalLM, "_keys_to_ignore_on_load_unexpected", [r"^mtp.*"])


def test_tensors_the_class_drops_are_written_through(tmp_path, monkeypatch) -> None:
    _mtp_like_qwen35(monkeypatch)
    fc, scale = fp8_blocks(torch.randn(256, 512) / 20)  # the releases store their multi-token layer in FP8 too
    mtp = {"mtp.fc.weight": fc, "mtp.fc.weight_scale_inv": scale, "mtp.norm.weight": torch.ones(256)}
    folder = _fp8_folder(tmp_path, 128, extra=mtp)
    lm = load_model(str(folder), device="cpu")
    assert lm.dropped_tensors == tuple(sorted(mtp)) and not lm.unused_tensors
    assert len(lm.quantization.weights) == 14  # the stack's: the dropped layer's are not read
    for layout in ("sliced", "dense"):
        record = export(lm, HEADS, layout=layout, verify_task=choice_task(), out=tmp_path / layout)
        assert record.dropped == record.passthrough == lm.dropped_tensors
        assert record.quantization.weights == 14 and not record.quantization.unquantized
        written = _stored(tmp_path / layout)
        assert all(_bytes(written[name]) == _bytes(mtp[name]) and written[name].dtype == mtp[name].dtype
                   for name in mtp)
        assert "were written through unchanged" in (tmp_path / layout / "README.md").read_text()
        again = load(tmp_path / layout, device="cpu")  # the export's class drops them again: a re-export keeps them
        assert again.dropped_tensors == lm.dropped_tensors


def _saved_with(tmp_path, model_type: str, extra: dict[str, torch.Tensor]):  # noqa: ANN001, ANN202
    """The tiny ``model_type`` model saved with ``extra`` checkpoint tensors beside its own."""
    from safetensors.torch import save_file

    tokenizer = build_tokenizer()
    folder = save_folder(family_model(model_type, len(tokenizer)), tokenizer, tmp_path / "m")
    save_file({**_stored(folder), **extra}, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def test_deberta_v3_prediction_heads_are_written_through(tmp_path) -> None:
    extra = {"mask_predictions.dense.weight": torch.randn(64, 64), "mask_predictions.classifier.bias": torch.randn(1)}
    lm = load_model(str(_saved_with(tmp_path, "deberta-v2", extra)), device="cpu")
    assert lm.dropped_tensors == tuple(sorted(extra)) and lm.quantization is None
    record = export(lm, "L0.H1", layout="sliced", out=tmp_path / "o")
    assert record.passthrough == tuple(sorted(extra))
    written = _stored(tmp_path / "o")
    assert all(_bytes(written[name]) == _bytes(extra[name]) for name in extra)


def test_gpt2_stale_mask_buffers_are_not_carried(tmp_path) -> None:
    stale = {"transformer.h.0.attn.bias": torch.tril(torch.ones(1, 1, 8, 8))}  # what old GPT-2 checkpoints hold
    lm = load_model(str(_saved_with(tmp_path, "gpt2", stale)), device="cpu")
    assert lm.dropped_tensors == ()  # a buffer of a module the class builds, which transformers rebuilds


def test_mxfp4_experts_are_written_through_byte_for_byte(tmp_path) -> None:
    tokenizer = build_tokenizer()
    folder = quantize_mxfp4(save_folder(family_model("gpt_oss", len(tokenizer), seed=1), tokenizer, tmp_path / "m"))
    stored, heads = _stored(folder), parse_heads(HEADS)
    lm = load_model(str(folder), dtype="checkpoint", device="cpu")
    assert lm.quantization.method == "mxfp4" and len(lm.quantization.weights) == 4  # gate_up, down x 2 layers
    with ablated(lm, heads):
        want = _logits(lm.model)
    for layout in ("sliced", "dense"):
        record = export(lm, HEADS, layout=layout, verify_task=choice_task(), out=tmp_path / layout)
        assert (record.quantization.unchanged, record.quantization.unquantized) == (4, ())
        written = _stored(tmp_path / layout)
        quantized = [name for name in stored if name.endswith(("_blocks", "_scales"))]
        assert len(quantized) == 8 and all(_bytes(written[n]) == _bytes(stored[n]) and written[n].dtype == torch.uint8
                                           for n in quantized)
        assert not any(name.endswith(("gate_up_proj", "down_proj")) for name in written)
        config = json.loads((tmp_path / layout / "config.json").read_text())
        assert config["quantization_config"] == json.loads((folder / "config.json").read_text())["quantization_config"]
        stock = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / layout,
                                                                  trust_remote_code=layout == "sliced")
        exact = layout == "dense"
        for model in (load(tmp_path / layout, device="cpu").model, stock):
            torch.testing.assert_close(_logits(model), want, atol=0 if exact else 2e-2, rtol=0 if exact else 2e-2)


def test_compressed_tensors_is_read_dequantized_and_exported_plain(tmp_path) -> None:
    needs("compressed_tensors", extra="compressed-tensors")
    tokenizer = build_tokenizer()
    folder = quantize_compressed_fp8(save_folder(family_model("qwen3", len(tokenizer), seed=4), tokenizer,
                                                 tmp_path / "m"))
    stored = _stored(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, quantization_config=transformers.CompressedTensorsConfig(dequantize=True))
    if any(name.endswith("weight_scale") for name in model.state_dict()):  # this transformers (5.17) keeps them
        with pytest.raises(UnsupportedModelError, match="kept compressed-tensors quantization parameters"):
            load_model(str(folder), device="cpu")
        return
    lm = load_model(str(folder), device="cpu")
    assert (lm.quantization.method, len(lm.quantization.weights), lm.quantization.read_as) == (
        "compressed-tensors", 14, "float32")
    for name in lm.quantization.weights:  # FP8 per output row times its scale (rounded to the scale's bfloat16 or not,
        want = stored[name].float() * stored[name + "_scale"].float()  # as the transformers release does)
        torch.testing.assert_close(lm.model.state_dict()[name], want, rtol=2 ** -8, atol=0)
    heads = parse_heads(HEADS)
    with ablated(lm, heads):
        want = _logits(lm.model)
    record = export(lm, HEADS, layout="dense", verify_task=choice_task(), out=tmp_path / "o")
    assert record.quantization.unquantized == lm.quantization.weights and "plain checkpoint" in record.quantization.why
    assert "quantization_config" not in json.loads((tmp_path / "o" / "config.json").read_text())
    stock = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "o")  # no compressed-tensors needed now
    torch.testing.assert_close(_logits(stock), want, atol=0, rtol=0)
    assert "written in float32" in (tmp_path / "o" / "README.md").read_text()


@pytest.mark.parametrize("method", ["awq", "bitsandbytes"])
def test_other_quantizations_are_refused_naming_what_is_read(tmp_path, method) -> None:
    tokenizer = build_tokenizer()
    folder = save_folder(family_model("llama", len(tokenizer)), tokenizer, tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": method}
    (folder / "config.json").write_text(json.dumps(config))
    result = invoke("eval", str(folder), "--task", "sentiment", "--limit", "4")
    assert_refused(result, f"quant_method '{method}' is not read by headprune")
    assert "FP8 block-quantized (fp8)" in result.output and "MXFP4 (mxfp4)" in result.output


def test_gguf_of_an_fp8_checkpoint_holds_the_dequantized_weights_and_says_so(tmp_path, monkeypatch) -> None:
    needs("xllamacpp", extra="gguf")
    _mtp_like_qwen35(monkeypatch)
    folder = _fp8_folder(tmp_path, 128, extra={"mtp.fc.weight": torch.randn(8, 8).to(torch.bfloat16)})
    result = invoke("export", str(folder), "--heads", "L1.H0", "--format", "gguf", "--layout", "dense", "--dtype",
                    "float32", "--out", str(tmp_path / "g"), "--verify-task", "sentiment", "--verify-limit", "4")
    from helpers.gguf_file import gguf_knows

    if not gguf_knows("qwen3"):  # an older gguf-py (the floor): one line saying so, nothing written
        assert result.exit_code == 2 and "does not know llama.cpp's qwen3 architecture" in result.output
        assert not (tmp_path / "g").exists()
        return
    assert result.exit_code == 0, result.output
    assert ("quantization: read FP8 block-quantized (fp8), dequantized to float32; a GGUF file holds the "
            "dequantized weights") in result.output
    card = (tmp_path / "g" / "README.md").read_text()
    assert "`mtp.fc.weight`) are not in this gguf file" in card and "an export as safetensors writes them" in card and "dequantized to float32" in card
