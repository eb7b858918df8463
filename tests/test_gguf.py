"""export --format gguf: the file runs in llama.cpp itself and decodes like the masked original.

These tests need llama.cpp (the pinned ``xllamacpp`` wheel, ``headprune[gguf]``, installed by ``scripts/setup.sh``);
without it they fail, saying so, rather than skip: a GGUF export that was never run in llama.cpp is not tested.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import PROMPTS, build_tiny, choice_task, generate_task, save_folder, text_task

from helpers.cli import invoke
from helpers.gguf_file import gguf_metadata
from headprune.exporter import export, read_record, runtimes, verify_record
from headprune.exporter.gguf import families as gguf_families
from headprune.exporter.gguf import writer as gguf_export
from headprune.exporter.llama_cpp import binding as llama_cpp_binding
from headprune.exporter.llama_cpp import runtime as llama_cpp_runtime
from headprune.exporter.formats.gguf import GGUF_TOLERANCE, Gguf
from headprune.heads import parse_heads
from headprune.loading.models import wrap_model
from headprune.surgery.slicing import densify


@pytest.fixture(scope="module", autouse=True)
def llama_cpp():  # noqa: ANN201
    version, reason = gguf_export.llama_cpp_version()
    if version is None:
        pytest.fail(f"these tests run GGUF files in llama.cpp: {reason}")
    return llama_cpp_runtime


def _mistral(tokenizer, seed: int = 0):  # noqa: ANN001, ANN202
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(seed)
    config = MistralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                           num_key_value_heads=2, max_position_embeddings=256, sliding_window=None,
                           vocab_size=len(tokenizer), pad_token_id=0, eos_token_id=1, bos_token_id=1)
    return wrap_model(MistralForCausalLM(config).eval(), tokenizer, name="tiny-mistral")


@pytest.fixture(scope="module")
def models(tokenizer):  # noqa: ANN001, ANN201
    built = {family: build_tiny(family, tokenizer, seed=5) for family in ("llama", "qwen2")}
    built["mistral"] = _mistral(tokenizer, seed=5)
    return built


# L0.H1 leaves layer 0 with an uneven group (keep-zeroed); L1.H0 + L1.H1 remove a whole KV group of the llama.
HEADS = "L0.H1,L1.H0,L1.H1"


@pytest.mark.parametrize("layout", ["dense", "sliced"])
@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral"])
def test_gguf_decodes_like_the_masked_original_in_llama_cpp(models, family, layout, tmp_path) -> None:
    lm = models[family]
    record = export(lm, HEADS, format="gguf", layout=layout, verify_task=generate_task(), out=tmp_path / "g")
    info = Gguf.details(record)
    check = info.runtime
    assert check.done and check.gated and check.runtime.startswith("llama.cpp")
    assert check.prompts == len(generate_task()) and check.tokens > 0
    assert check.mismatches == 0 and check.identical + check.ties == check.prompts
    assert check.identical >= check.prompts - 1
    assert check.tokenizer_agree == check.tokenizer_texts > 0
    assert record.verification.task.measured_on.startswith("llama.cpp")
    assert record.verification.task.disagreements == 0
    # The written file itself, run here in llama.cpp: per-position logits of every prompt against the masked original.
    diff, scale = _file_against_masked(lm, parse_heads(HEADS), tmp_path / "g" / "model.gguf", generate_task())
    assert diff <= GGUF_TOLERANCE * max(1.0, scale), (diff, scale)
    assert info.read_back_max_abs_diff == 0.0 and info.tensors_read_back > 0
    # The file: architecture, per-layer head counts, key length, tokenizer.
    _, meta = gguf_metadata(tmp_path / "g" / "model.gguf")
    arch = meta["general.architecture"]
    assert arch == info.architecture == ("deci" if layout == "sliced" else "qwen2" if family == "qwen2" else "llama")
    heads = meta[f"{arch}.attention.head_count"]
    if layout == "sliced":
        assert list(heads) == list(info.head_count) and sum(heads) < 8
    else:
        assert heads == 4
    assert meta[f"{arch}.attention.key_length"] == lm.grid.head_dim
    assert meta["tokenizer.ggml.model"] == "gpt2" and meta["tokenizer.ggml.pre"] == "gpt-2"
    assert meta["tokenizer.ggml.eos_token_id"] == lm.tokenizer.eos_token_id
    assert len(meta["tokenizer.ggml.tokens"]) == lm.model.config.vocab_size
    verify_record(tmp_path / "g")
    assert set(read_record(tmp_path / "g").files) == {"model.gguf", "README.md"}


def test_gguf_choice_and_text_tasks_are_remeasured_in_llama_cpp(models, tmp_path) -> None:
    lm = models["llama"]
    for name, task in (("c", choice_task()), ("t", text_task())):
        record = export(lm, "L1.H2", format="gguf", layout="sliced", verify_task=task, out=tmp_path / name)
        assert record.verification.task.disagreements == 0
        assert record.verification.task.measured_on.startswith("llama.cpp")
        assert Gguf.details(record).runtime.mismatches == 0


def _file_against_masked(lm, heads, path, task) -> tuple[float, float]:  # noqa: ANN001
    """Largest |llama.cpp logits of the file - masked original's| over every position of every task prompt, and the
    largest |masked logit|: computed here, not read from the export's record."""
    from headprune.surgery.ablation import ablated

    diff = scale = 0.0
    runner = runtimes.LlamaCppModel(path, n_ctx=128, eos=())
    try:
        for example in task.examples:
            tokens = lm.tokenizer(example.prompt or example.text)["input_ids"]
            with torch.no_grad(), ablated(lm, heads):
                want = lm.model(input_ids=torch.tensor([tokens])).logits[0].float()
            diff = max(diff, float((runner.logits(tokens) - want).abs().max()))
            scale = max(scale, float(want.abs().max()))
    finally:
        runner.close()
    return diff, scale


def _llama_cpp_logits(path, tokens) -> torch.Tensor:  # noqa: ANN001
    runner = runtimes.LlamaCppModel(path, n_ctx=64, eos=())
    try:
        return runner.logits(tokens)
    finally:
        runner.close()


def _write_intact(lm, folder):  # noqa: ANN001, ANN202
    arch = gguf_families.check_supported(lm, "dense", "f32")
    plans = None
    return gguf_export.write_files(lm, lm.model, arch, plans, folder, folder, "f32")


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_qk_permutation_is_what_llama_cpp_expects(models, family, tmp_path, monkeypatch) -> None:
    """Intact model: llama.cpp's logits equal torch's; with the q/k permutation left out they do not. Queries and
    keys are scaled up so that attention is sharp and the rotation's pairing of dimensions shows in the logits."""
    import copy

    lm = copy.copy(models[family])
    lm.model = copy.deepcopy(lm.model)
    with torch.no_grad():
        for layer in lm.model.model.layers:
            layer.self_attn.q_proj.weight *= 12
            layer.self_attn.k_proj.weight *= 12
    tokens = lm.tokenizer("the film is a delight from start to finish")["input_ids"]
    with torch.no_grad():
        want = lm.model(input_ids=torch.tensor([tokens])).logits[0].float()
    written = _write_intact(lm, tmp_path)
    got = _llama_cpp_logits(written.f32_path, tokens)
    allowed = GGUF_TOLERANCE * max(1.0, float(want.abs().max()))
    assert float((got - want).abs().max()) <= allowed / 10
    # A dense llama and every sliced model are permuted; qwen2 runs NeoX rotation on rows as they are.
    assert written.plan.permuted == (family == "llama")
    (tmp_path / "wrong").mkdir()
    if family == "llama":
        monkeypatch.setattr(gguf_export, "permute", lambda weight, head_dim: weight)
    else:
        monkeypatch.setattr(gguf_export, "gguf_plan", lambda lm, arch, plans: gguf_export.GgufPlan(
            arch, (4, 4), (1, 1), lm.grid.head_dim, True))
    wrong = _write_intact(lm, tmp_path / "wrong")
    bad = _llama_cpp_logits(wrong.f32_path, tokens)
    assert float((bad - want).abs().max()) > 10 * allowed


def test_permute_matches_llama_cpp_converter_and_inverts() -> None:
    weight = torch.arange(4 * 8 * 3, dtype=torch.float32).reshape(4 * 8, 3)
    # The converter's LlamaModel.permute, verbatim.
    n_head = 4
    expected = (weight.reshape(n_head, 2, weight.shape[0] // n_head // 2, *weight.shape[1:])
                .swapaxes(1, 2).reshape(weight.shape))
    assert torch.equal(gguf_export.permute(weight, 8), expected)
    assert torch.equal(gguf_export.unpermute(gguf_export.permute(weight, 8), 8), weight)


def test_plain_llama_architecture_cannot_take_per_layer_head_counts(models, tmp_path, llama_cpp) -> None:
    """Why sliced GGUF is deci: llama.cpp's llama graph sizes every layer by layer 0's head count, so a llama
    file with per-layer head-count arrays does not load; the same tensors as deci do."""
    from headprune.surgery.plan import plan_layers
    from headprune.surgery.slicing import slice_model

    lm = models["llama"]
    removed = parse_heads("L1.H0,L1.H1")
    plans = plan_layers(lm.grid, removed)
    artifact = slice_model(lm, plans, removed)
    write, _, _ = gguf_export.tokenizer_writer(lm, lm.model.config.vocab_size, tmp_path)
    for arch in ("llama", "deci"):
        plan = gguf_export.GgufPlan(arch, (4, 2), (2, 1), lm.grid.head_dim, True)
        tensors = gguf_export.gguf_tensors(artifact, plan)
        path = tmp_path / f"{arch}.gguf"
        gguf_export.write_gguf(path, artifact, plan, tensors, write, name="x", gguf_type="f32")
        if arch == "llama":
            with pytest.raises(ValueError, match="could not load"):
                llama_cpp.LlamaCpp(path, n_ctx=32)
        else:
            llama_cpp.LlamaCpp(path, n_ctx=32).close()


# RoPE scalings as Llama 3.x, Qwen2.5 (yarn) and older long-context checkpoints ship them, at sizes where each one
# changes the tiny model's rotation on the test prompts (head_dim 16: wavelengths from 6 to 45,000 tokens).
ROPE_SCALINGS = {
    "llama3": dict(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=32),
    "yarn": dict(factor=4.0, original_max_position_embeddings=64),
    "linear": dict(factor=4.0),
    "dynamic": dict(factor=4.0),
}


def _rope_llama(tokenizer, rope_type: str, family: str = "llama"):  # noqa: ANN001, ANN202
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    torch.manual_seed(3)
    rope = {"rope_type": rope_type, "rope_theta": 10000.0, **ROPE_SCALINGS.get(rope_type, {})}
    config = (Qwen2Config if family == "qwen2" else LlamaConfig)(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=256, vocab_size=len(tokenizer), rope_parameters=rope, pad_token_id=0,
        eos_token_id=1, bos_token_id=1, initializer_range=0.2)  # weights large enough for positions to matter
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    return wrap_model(model, tokenizer, name=f"tiny-{family}-{rope_type}")


@pytest.mark.parametrize(("rope_type", "family", "layout"), [
    ("llama3", "llama", "sliced"), ("llama3", "llama", "dense"), ("llama3", "qwen2", "dense"),
    ("yarn", "llama", "sliced"), ("linear", "llama", "sliced"), ("dynamic", "llama", "dense")])
def test_rope_scalings_run_in_llama_cpp_as_in_transformers(tokenizer, rope_type, family, layout, tmp_path) -> None:
    """Llama 3.x checkpoints (``rope_type: llama3``) carry llama.cpp's ``rope_freqs`` tensor, which the read-back
    expects; every scaling is run in llama.cpp and compared with the masked original position by position."""
    lm = _rope_llama(tokenizer, rope_type, family)
    tokens = lm.tokenizer(PROMPTS[3])["input_ids"]
    with torch.no_grad():  # the scaling matters on these prompts: a file that ignored it would fail the gate
        scaled = lm.model(input_ids=torch.tensor([tokens])).logits[0]
        plain = _rope_llama(tokenizer, "default", family).model(input_ids=torch.tensor([tokens])).logits[0]
    assert float((scaled - plain).abs().max()) > 0.1 or rope_type == "dynamic"
    heads = "L0.H1,L1.H0"
    record = export(lm, heads, format="gguf", layout=layout, verify_task=generate_task(), out=tmp_path / "g")
    info = Gguf.details(record)
    assert info.runtime.done and info.runtime.mismatches == 0
    diff, scale = _file_against_masked(lm, parse_heads(heads), tmp_path / "g" / "model.gguf", generate_task())
    assert diff <= GGUF_TOLERANCE * max(1.0, scale), (diff, scale)
    reader, meta = gguf_metadata(tmp_path / "g" / "model.gguf")
    names = {t.name for t in reader.tensors}
    assert ("rope_freqs.weight" in names) == (rope_type == "llama3")
    assert meta["general.architecture"] == info.architecture == ("deci" if layout == "sliced" else "llama")
    assert ("dynamic NTK" in " ".join(info.notes)) == (rope_type == "dynamic")
    verify_record(tmp_path / "g")


def test_qwen3_dense_gguf_runs_in_llama_cpp_and_sliced_is_refused(tokenizer, tmp_path) -> None:
    """Qwen3 (per-head-size q/k norms) in llama.cpp's own qwen3 graph: dense only, since the deci graph that takes
    per-layer head counts has no q/k norms; the refusal is one line naming what works."""
    import gguf

    from headprune.errors import UnsupportedModelError
    from headprune.testing import family_model

    lm = wrap_model(family_model("qwen3", len(tokenizer), seed=2), tokenizer, name="tiny-qwen3")
    heads = "L0.H1,L1.H0,L1.H1"
    if "qwen3" not in gguf.MODEL_ARCH_NAMES.values():  # gguf-py before qwen3 (its floor, 0.14): refused, not lost
        with pytest.raises(UnsupportedModelError, match="does not know llama.cpp's qwen3 architecture"):
            export(lm, heads, format="gguf", layout="dense", verify_task=generate_task(), out=tmp_path / "g")
        assert not (tmp_path / "g").exists()
        return
    record = export(lm, heads, format="gguf", layout="dense", verify_task=generate_task(), out=tmp_path / "g")
    info = Gguf.details(record)
    assert info.architecture == "qwen3" and info.runtime.done and info.runtime.mismatches == 0
    diff, scale = _file_against_masked(lm, parse_heads(heads), tmp_path / "g" / "model.gguf", generate_task())
    assert diff <= GGUF_TOLERANCE * max(1.0, scale), (diff, scale)
    reader, _ = gguf_metadata(tmp_path / "g" / "model.gguf")
    assert "blk.0.attn_q_norm.weight" in {t.name for t in reader.tensors}
    save_folder(lm.model, tokenizer, tmp_path / "m")
    task = tmp_path / "t.jsonl"
    task.write_text(json.dumps({"prompt": "the film is", "target": "x"}) + "\n")
    result = invoke("export", str(tmp_path / "m"), "--heads", heads, "--format", "gguf", "--verify-task", str(task),
                    "--out", str(tmp_path / "o"))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "q/k norms" in lines[0] and "--layout dense" in lines[0] and not (tmp_path / "o").exists()


def test_longrope_is_refused_naming_what_works(tokenizer, tmp_path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 64,
            "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=256, vocab_size=len(tokenizer),
                         rope_parameters=rope, pad_token_id=0, eos_token_id=1, bos_token_id=1)
    save_folder(LlamaForCausalLM(config), tokenizer, tmp_path / "m")
    task = tmp_path / "t.jsonl"
    task.write_text(json.dumps({"prompt": "the film is", "target": "x"}) + "\n")
    result = invoke("export", str(tmp_path / "m"), "--heads", "L0.H1", "--format", "gguf", "--verify-task", str(task),
                    "--out", str(tmp_path / "o"))
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "'longrope'" in lines[0] and "llama3" in lines[0] and "safetensors, onnx" in lines[0]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("gguf_type", ["f16", "bf16", "q8_0"])
def test_gguf_types_verify_a_float32_copy_and_report_their_own_agreement(models, gguf_type, tmp_path) -> None:
    lm = models["llama"]
    record = export(lm, HEADS, format="gguf", layout="sliced", verify_task=generate_task(), out=tmp_path / "g",
                    gguf_type=gguf_type)
    info = Gguf.details(record)
    assert info.gguf_type == gguf_type and info.runtime.file_type == "f32" and info.runtime.mismatches == 0
    typed = info.typed_runtime
    assert typed is not None and typed.done and not typed.gated and typed.file_type == gguf_type
    assert typed.prompts == info.runtime.prompts
    assert 0 < info.read_back_max_abs_diff < 0.05  # the stored type's rounding, read back
    name = f"model-{gguf_type.upper()}.gguf"  # the type in the name, as llama.cpp users name files
    quantized = info.quantized  # gated on the float32 file; the task on it and on the original in the same type
    assert info.file == name and quantized.rms_diff <= quantized.allowed and quantized.original is not None
    reader, meta = gguf_metadata(tmp_path / "g" / name)
    assert meta["general.file_type"] == gguf_export.FILE_TYPES[gguf_type]
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert types["blk.0.attn_norm.weight"] == "F32"
    assert types["blk.0.attn_q.weight"] == gguf_type.upper()
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == ["README.md", "headprune_export.json", name]


def test_sliced_gguf_is_smaller_than_dense(models, tmp_path) -> None:
    lm = models["llama"]
    dense = export(lm, "L1.H0,L1.H1", format="gguf", layout="dense", verify_task=generate_task(), out=tmp_path / "d")
    sliced = export(lm, "L1.H0,L1.H1", format="gguf", layout="sliced", verify_task=generate_task(),
                    out=tmp_path / "s")
    assert sliced.bytes.after < dense.bytes.after
    assert Gguf.details(sliced).head_count == (4, 2) and Gguf.details(sliced).head_count_kv == (2, 1)


def test_dense_gguf_zeroes_the_removed_heads_output_columns(models, tmp_path) -> None:
    lm = models["llama"]
    export(lm, "L0.H2", format="gguf", layout="dense", verify_task=generate_task(), out=tmp_path / "d")
    reader, _ = gguf_metadata(tmp_path / "d" / "model.gguf")
    wo = next(t for t in reader.tensors if t.name == "blk.0.attn_output.weight")
    data = np.array(wo.data).reshape(32, 4 * 8)  # (out, in): head 2 is input columns 16..23
    assert not data[:, 16:24].any() and data[:, :16].any()
    want = densify(lm, parse_heads("L0.H2")).model.layers[0].self_attn.o_proj.weight.detach().numpy()
    assert np.array_equal(data, want)


def test_without_llama_cpp_the_record_says_it_was_not_run(models, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(gguf_export, "llama_cpp_version", lambda: (None, "llama.cpp is not usable (test)"))
    record = export(models["llama"], "L1.H2", format="gguf", layout="sliced", verify_task=generate_task(),
                    out=tmp_path / "g")
    assert not Gguf.details(record).runtime.done and "not usable (test)" in Gguf.details(record).runtime.reason
    assert "llama.cpp was not available" in record.verification.task.measured_on
    assert "Not run in llama.cpp" in (tmp_path / "g" / "README.md").read_text()


@pytest.mark.parametrize("family", ["gpt2", "gpt_neox", "bert", "gemma2"])
def test_a_gguf_headprune_cannot_write_is_refused_with_exit_2(family, tokenizer, tmp_path) -> None:
    """The default (sliced) layout of a family llama.cpp runs only dense (gpt2, gpt_neox, gemma2), or an encoder
    llama.cpp's graphs do not run as headprune scores it (bert): one line naming what works, nothing written."""
    lm = build_tiny(family, tokenizer)
    save_folder(lm.model, tokenizer, tmp_path / "m")
    task = tmp_path / "t.jsonl"
    task.write_text(json.dumps({"prompt": "the film is", "choices": [" a", " b"], "answer": 0}) + "\n")
    result = invoke("export", str(tmp_path / "m"), "--heads", "L0.H1", "--format", "gguf", "--verify-task", str(task),
                    "--out", str(tmp_path / "o"))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "safetensors, onnx" in lines[0] and "Traceback" not in result.output
    assert not (tmp_path / "o").exists()


def test_cli_gguf_export(models, tokenizer, tmp_path) -> None:
    lm = models["llama"]
    save_folder(lm.model, tokenizer, tmp_path / "m")
    task = tmp_path / "t.jsonl"
    task.write_text("".join(json.dumps({"prompt": p, "target": "19"}) + "\n" for p in ("12 + 7 =", "the film is")))
    result = invoke("export", str(tmp_path / "m"), "--heads", "L1.H0,L1.H1", "--format", "gguf", "--layout", "sliced",
                    "--gguf-type", "q8_0", "--verify-task", str(task), "--out", str(tmp_path / "o"), "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["format"] == "gguf" and out["gguf"]["gguf_type"] == "q8_0" and out["gguf"]["runtime"]["done"]
    result = invoke("export", str(tmp_path / "m"), "--heads", "L1.H0", "--format", "gguf", "--verify-task", str(task),
                    "--out", str(tmp_path / "o2"))
    assert result.exit_code == 0, result.output
    assert "llama.cpp (deci, float32)" in result.output and "model.gguf" in result.output
    # Users are told to run it with what headprune ran it in, and how.
    ran = Gguf.details(read_record(tmp_path / "o2")).runtime.runtime
    assert ran == llama_cpp_binding.library().runtime and f"checked in {ran}" in result.output
    card = (tmp_path / "o2" / "README.md").read_text()
    assert f"Checked in {ran}" in card
    assert ("from llama_cpp import Llama" in card) == ("llama-cpp-python" in ran)
    assert ("xllamacpp.Server(params)" in card) == ("llama-cli -m model.gguf" in card) == ("xllamacpp" in ran)


@pytest.mark.slow
def test_smollm2_gguf_decodes_like_the_masked_original(smollm2, tmp_path, monkeypatch) -> None:
    """The default model (itself from a GGUF file): two KV groups and two single heads removed, sliced, run in
    llama.cpp; its tokenizer and chat template are the source file's."""
    from helpers import PROMPTS

    from headprune.exporter import pipeline
    from headprune.tasks import Example, Task

    monkeypatch.setattr(pipeline, "GREEDY_STEPS", 8)
    prompts = PROMPTS[:4]
    task = Task("gen", "generate", tuple(Example(f"g{i}", prompt=p, target="x") for i, p in enumerate(prompts)),
                max_new_tokens=4)
    heads = "L3.H0,L3.H1,L3.H2,L10.H3,L10.H4,L10.H5,L12.H1,L20.H7"
    record = export(smollm2, heads, format="gguf", layout="sliced", verify_task=task, out=tmp_path / "g")
    diff, scale = _file_against_masked(smollm2, parse_heads(heads), tmp_path / "g" / "model.gguf", task)
    assert diff <= GGUF_TOLERANCE * max(1.0, scale), (diff, scale)  # llama.cpp run here, not the record's number
    info = Gguf.details(record)
    check = info.runtime
    assert check.done and check.mismatches == 0 and check.identical == check.prompts == len(prompts)
    assert check.tokenizer_agree == check.tokenizer_texts == len(prompts)
    assert info.chat_template and "copied from SmolLM2-135M-Instruct" in info.tokenizer
    assert info.head_count[3] == info.head_count[10] == 6 and info.head_count_kv[3] == 2
    assert record.parameters.after < record.parameters.before
    assert record.verification.task.disagreements == 0
