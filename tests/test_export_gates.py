"""The export gates check numbers, not only tokens: a file with one weight 0.1% wrong (one tensor scaled by 1.001
inside the written file) must be refused, in llama.cpp (GGUF), ONNX Runtime and ONNX Runtime GenAI, and a sound
file must match the masked original within the tolerance when this test runs the runtime itself.

Like tests/test_gguf.py, these need llama.cpp (``headprune[gguf]``) and onnxruntime-genai: without them they fail,
saying so, rather than skip.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import build_tiny, choice_task, generate_task, save_folder

from headprune.surgery.ablation import ablated
from helpers.cli import invoke
from headprune.errors import VerificationError
from headprune.exporter import export
from headprune.exporter.gguf import writer as gguf_export
from headprune.exporter.gguf import families as gguf_families
from headprune.exporter.gguf import read as gguf_read
from headprune.exporter.onnx import export as onnx_export
from headprune.exporter.formats.gguf import GGUF_TOLERANCE
from headprune.exporter.formats.onnx import ONNX_TOLERANCE
from headprune.exporter.pipeline import GREEDY_STEPS
from headprune.exporter.runtime_check import compare_greedy, gate, task_texts
from headprune.exporter.runtimes import GenaiRunner, LlamaCppModel, empty_past
from headprune.heads import parse_heads

HEADS = "L0.H1,L1.H0,L1.H1"
WRONG = 1.001  # a 0.1% error in one tensor


@pytest.fixture(scope="module", autouse=True)
def runtimes() -> None:
    version, reason = gguf_export.llama_cpp_version()
    if version is None:
        pytest.fail(f"these tests run GGUF files in llama.cpp: {reason}")
    version, reason = onnx_export.genai_version()
    if version is None:
        pytest.fail(f"these tests run ONNX exports in ONNX Runtime GenAI: {reason}")


@pytest.fixture(scope="module")
def models(tokenizer):  # noqa: ANN001, ANN201
    return {family: build_tiny(family, tokenizer, seed=5) for family in ("llama", "gpt2")}


def scale_gguf_tensor(path, name: str, factor: float) -> None:  # noqa: ANN001
    """Multiply one float32 tensor of a GGUF file by ``factor``, in place."""
    _, infos, _ = gguf_read.read_gguf(path)
    _, kind, offset, nbytes = infos[name]
    assert kind.name == "F32"
    with open(path, "r+b") as handle:
        handle.seek(offset)
        data = np.frombuffer(handle.read(nbytes), dtype=np.float32) * np.float32(factor)
        handle.seek(offset)
        handle.write(data.astype(np.float32).tobytes())


def scale_onnx_initializer(path, name: str, factor: float) -> None:  # noqa: ANN001
    """Multiply one weight (initializer) of an ONNX file by ``factor``, in place."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    (init,) = [i for i in model.graph.initializer if i.name == name]
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(factor), name))
    onnx.save(model, str(path))


def _corrupting_gguf_writer(monkeypatch, name: str) -> None:  # noqa: ANN001
    """write_files as usual (it reads every tensor back), then one tensor of the written file scaled."""
    original = gguf_export.write_files

    def write(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        written = original(*args, **kwargs)
        scale_gguf_tensor(written.f32_path, name, WRONG)
        return written
    monkeypatch.setattr(gguf_export, "write_files", write)


# The effect of the 1.001 scale on this model's logits (measured: intact 1.2e-7): output.weight 4.6e-4,
# token_embd 2.0e-4, blk.0.attn_v 1.7e-4, blk.1.attn_output 1.7e-4, output_norm 4.6e-4 (allowed: the tolerance,
# the logits being below 1). A 0.1% error in q/k (1e-6 here: near-uniform attention) is below any float32 gate.
@pytest.mark.parametrize("tensor", ["output.weight", "token_embd.weight", "blk.0.attn_v.weight",
                                    "blk.1.attn_output.weight"])
def test_gguf_with_one_weight_off_by_a_thousandth_is_refused(models, tensor, tmp_path, monkeypatch) -> None:
    _corrupting_gguf_writer(monkeypatch, tensor)
    with pytest.raises(VerificationError, match="differs from the masked original"):
        export(models["llama"], HEADS, format="gguf", layout="sliced", verify_task=generate_task(), out=tmp_path / "g")
    assert not (tmp_path / "g").exists()


def test_cli_refuses_a_gguf_file_with_a_wrong_norm_with_exit_1(models, tokenizer, tmp_path, monkeypatch) -> None:
    lm = models["llama"]
    save_folder(lm.model, tokenizer, tmp_path / "m")
    task = tmp_path / "t.jsonl"
    task.write_text("".join(json.dumps({"prompt": p, "target": "19"}) + "\n" for p in ("12 + 7 =", "the film is")))
    _corrupting_gguf_writer(monkeypatch, "output_norm.weight")
    result = invoke("export", str(tmp_path / "m"), "--heads", HEADS, "--format", "gguf",
                    "--verify-task", str(task), "--out", str(tmp_path / "o"), catch_exceptions=True)
    assert result.exit_code == 1, result.output
    assert "nothing was written" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "o").exists()


def test_llama_cpp_greedy_gate_refuses_wrong_logits_even_when_tokens_agree(models, tmp_path) -> None:
    """The greedy runtime check on its own: a file whose tokens all agree but whose logits are 0.1% off fails."""
    lm, heads = models["llama"], parse_heads(HEADS)
    arch = gguf_families.check_supported(lm, "dense", "f32")
    from headprune.surgery.slicing import densify

    written = gguf_export.write_files(lm, densify(lm, heads), arch, None, tmp_path, tmp_path, "f32")
    prompts = [list(lm.tokenizer(text)["input_ids"]) for text in task_texts(generate_task())]
    options = dict(steps=GREEDY_STEPS, mode="zero", means=None, tolerance=GGUF_TOLERANCE, runtime="llama.cpp",
                   file_type="f32", gated=True, texts=[])
    checks = {}
    for label in ("sound", "wrong"):
        if label == "wrong":
            scale_gguf_tensor(written.f32_path, "output_norm.weight", WRONG)
        runner = LlamaCppModel(written.f32_path, n_ctx=128, eos=())
        try:
            checks[label] = compare_greedy(lm, heads, runner, prompts, **options)
        finally:
            runner.close()
    gate(checks["sound"], GGUF_TOLERANCE, "llama.cpp")
    assert checks["wrong"].mismatches == 0  # the tokens alone would pass it
    with pytest.raises(VerificationError, match="logits differ"):
        gate(checks["wrong"], GGUF_TOLERANCE, "llama.cpp")


def _onnx_against_masked(lm, heads, path) -> tuple[float, float]:  # noqa: ANN001
    """Largest |onnxruntime logits of the written file - masked original's| over every real token, and the largest
    |masked logit|: onnxruntime run here, not the record's number."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    diff = scale = 0.0
    for text in task_texts(choice_task()):
        ids = torch.tensor([lm.tokenizer(text)["input_ids"]])
        feeds = {"input_ids": ids.numpy(), "attention_mask": np.ones_like(ids.numpy()),
                 "position_ids": np.arange(ids.shape[1])[None]}
        for past in session.get_inputs()[3:]:
            feeds[past.name] = empty_past(past.shape, 1)
        got = torch.from_numpy(session.run(["logits"], feeds)[0])[0]
        with torch.no_grad(), ablated(lm, heads):
            want = lm.model(input_ids=ids).logits[0].float()
        diff, scale = max(diff, float((got - want).abs().max())), max(scale, float(want.abs().max()))
    return diff, scale


@pytest.mark.parametrize(("family", "weight"), [
    ("gpt2", "model.lm_head.weight"),
    pytest.param("llama", "model.model.embed_tokens.weight", marks=pytest.mark.slow)])  # a decoder with a cache
def test_onnx_matches_and_a_wrong_weight_is_refused(models, family, weight, tmp_path, monkeypatch) -> None:
    lm, heads = models[family], parse_heads(HEADS)
    export(lm, HEADS, format="onnx", verify_task=choice_task(), out=tmp_path / "ok")
    diff, scale = _onnx_against_masked(lm, heads, tmp_path / "ok" / "model.onnx")
    assert diff <= ONNX_TOLERANCE * max(1.0, scale), (diff, scale)
    name = "export_decoder" if onnx_export.generates(lm.model.config.model_type, lm.task_head) else "export_onnx"
    original = getattr(onnx_export, name)

    def corrupt(model, where, **kwargs):  # noqa: ANN001, ANN003, ANN202
        out = original(model, where, **kwargs)
        scale_onnx_initializer(where / onnx_export.ONNX_NAME if where.is_dir() else where, weight, WRONG)
        return out
    monkeypatch.setattr(onnx_export, name, corrupt)
    with pytest.raises(VerificationError, match="differs from the masked original"):
        export(lm, HEADS, format="onnx", verify_task=choice_task(), out=tmp_path / "bad")
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow  # an ONNX export with a key/value cache, decoded twice in GenAI
def test_genai_greedy_gate_refuses_wrong_logits_even_when_tokens_agree(models, tmp_path) -> None:
    """ONNX Runtime GenAI's own per-step logits are gated: a sound decoder passes, the same one with its final
    embedding 0.1% off fails although it decodes the same tokens."""
    lm, heads = models["llama"], parse_heads(HEADS)
    export(lm, HEADS, format="onnx", verify_task=choice_task(), out=tmp_path / "o")
    prompts = [list(lm.tokenizer(text)["input_ids"]) for text in task_texts(generate_task())]
    options = dict(steps=GREEDY_STEPS, mode="zero", means=None, tolerance=ONNX_TOLERANCE,
                   runtime="ONNX Runtime GenAI", file_type="f32", gated=True, texts=[])
    sound = compare_greedy(lm, heads, GenaiRunner(tmp_path / "o"), prompts, **options)
    gate(sound, ONNX_TOLERANCE, "ONNX Runtime GenAI")
    scale_onnx_initializer(tmp_path / "o" / onnx_export.ONNX_NAME, "model.model.embed_tokens.weight", WRONG)
    wrong = compare_greedy(lm, heads, GenaiRunner(tmp_path / "o"), prompts, **options)
    assert wrong.mismatches == 0 and wrong.tokens == sound.tokens
    with pytest.raises(VerificationError, match="logits differ"):
        gate(wrong, ONNX_TOLERANCE, "ONNX Runtime GenAI")
