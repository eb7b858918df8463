"""export --format gguf --gguf-type q4_k_m|q5_k_m|q6_k: llama.cpp's own quantizer, its choice of each tensor's type,
the file run in llama.cpp, gated on the float32 file, and the task measured on the quantized original and pruned.

Like tests/test_gguf.py these need llama.cpp (xllamacpp, installed by ``scripts/setup.sh``) and fail without it.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import build_tokenizer, choice_task, save_folder

from helpers.cli import invoke
from helpers.gguf_file import gguf_metadata
from headprune.errors import VerificationError
from headprune.exporter import export, read_record
from headprune.exporter.gguf import writer as gguf_export
from headprune.exporter.gguf import quant as gguf_quant
from headprune.exporter.formats.gguf import Gguf
from headprune.exporter.gguf.quant import tensor_types, use_more_bits
from headprune.loading.models import wrap_model

BLOCKS = {"Q4_K": 256, "Q5_K": 256, "Q6_K": 256, "Q8_0": 32, "Q5_0": 32, "Q5_1": 32, "F16": 1}


def _columns(layers: int, hidden: int, ffn: int, heads: int, kv: int, head_dim: int, *, tied: bool) -> dict:
    """A Llama-style file's tensors as (dimensions, row length), as headprune writes them."""
    out = {"token_embd.weight": (2, hidden), "output_norm.weight": (1, hidden)}
    if not tied:
        out["output.weight"] = (2, hidden)
    for i in range(layers):
        out |= {f"blk.{i}.attn_norm.weight": (1, hidden), f"blk.{i}.ffn_norm.weight": (1, hidden),
                f"blk.{i}.attn_q.weight": (2, hidden), f"blk.{i}.attn_k.weight": (2, hidden),
                f"blk.{i}.attn_v.weight": (2, hidden), f"blk.{i}.attn_output.weight": (2, heads * head_dim),
                f"blk.{i}.ffn_gate.weight": (2, hidden), f"blk.{i}.ffn_up.weight": (2, hidden),
                f"blk.{i}.ffn_down.weight": (2, ffn)}
    return out


def test_use_more_bits_is_llama_quant_cpps() -> None:
    # i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2, with C's integer division: for 30 layers n/8 = 3, 7n/8 = 26.
    assert [i for i in range(30) if use_more_bits(i, 30)] == [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]
    assert [i for i in range(8) if use_more_bits(i, 8)] == [0, 3, 6, 7]


def test_smollm2_shape_q4_k_m_is_what_llama_quant_cpp_picks() -> None:
    """SmolLM2-135M's shapes (576 wide: not a multiple of Q4_K's 256-wide blocks): llama-quant.cpp's rules, read
    from its source: tied embeddings take the output's type (576 % 256 != 0: Q8_0); the attention and gate/up
    matrices fall back from Q4_K to Q5_0; attn_v and ffn_down of the use_more_bits layers get Q6_K (attn_v, 576 wide,
    falls back to Q8_0); ffn_down is 1536 wide and keeps K-quants."""
    columns = _columns(30, 576, 1536, 9, 3, 64, tied=True)
    types = tensor_types(columns, "q4_k_m", arch="llama", n_layer=30, n_head=9, n_head_kv=3, block=BLOCKS.get)
    more = [i for i in range(30) if use_more_bits(i, 30)]
    assert types["token_embd.weight"] == "Q8_0" and types["output_norm.weight"] == "F32"
    for i in range(30):
        assert types[f"blk.{i}.attn_norm.weight"] == "F32"
        assert {types[f"blk.{i}.{n}.weight"] for n in ("attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up")} \
            == {"Q5_0"}
        assert types[f"blk.{i}.attn_v.weight"] == ("Q8_0" if i in more else "Q5_0")
        assert types[f"blk.{i}.ffn_down.weight"] == ("Q6_K" if i in more else "Q4_K")
    q6 = tensor_types(columns, "q6_k", arch="llama", n_layer=30, n_head=9, n_head_kv=3, block=BLOCKS.get)
    assert q6["token_embd.weight"] == q6["blk.4.attn_q.weight"] == "Q8_0" and q6["blk.4.ffn_down.weight"] == "Q6_K"
    q5 = tensor_types(columns, "q5_k_m", arch="deci", n_layer=30, n_head=9, n_head_kv=3, block=BLOCKS.get)
    assert q5["blk.4.attn_q.weight"] == "Q5_1" and q5["blk.4.ffn_down.weight"] == "Q5_K"
    assert q5["blk.5.ffn_down.weight"] == "Q6_K"


def test_wide_rows_untied_output_and_the_70b_rule() -> None:
    """4096-wide rows keep K-quants; an untied output gets Q6_K and the token embeddings the default; an 80-layer
    Llama with grouped key/value heads (llama.cpp's LLM_TYPE_70B) gets Q5_K for attn_v instead of Q4_K."""
    columns = _columns(80, 4096, 14336, 32, 8, 128, tied=False)
    types = tensor_types(columns, "q4_k_m", arch="llama", n_layer=80, n_head=32, n_head_kv=8, block=BLOCKS.get)
    assert types["output.weight"] == "Q6_K" and types["token_embd.weight"] == "Q4_K"
    # 80 layers: use_more_bits below 10, from 70, and where (i - 10) % 3 == 2 (layer 12, not 11).
    assert types["blk.12.attn_v.weight"] == types["blk.12.ffn_down.weight"] == "Q6_K"
    assert types["blk.11.attn_v.weight"] == "Q5_K"
    assert types["blk.11.attn_q.weight"] == types["blk.11.ffn_down.weight"] == "Q4_K"
    same_heads = tensor_types(columns, "q4_k_m", arch="llama", n_layer=80, n_head=32, n_head_kv=32, block=BLOCKS.get)
    assert same_heads["blk.11.attn_v.weight"] == "Q4_K"  # LLM_TYPE_65B: no bump


def _wide(tokenizer, seed: int = 0, layers: int = 8):  # noqa: ANN001, ANN202
    """A random Llama 256 wide (K-quants' blocks divide its rows), with grouped key/value heads."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=layers, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=256, vocab_size=len(tokenizer),
                         pad_token_id=0, eos_token_id=1, bos_token_id=1)
    return wrap_model(LlamaForCausalLM(config).eval(), tokenizer, name="tiny-wide")


@pytest.fixture(scope="module")
def wide():  # noqa: ANN201
    return _wide(build_tokenizer(), layers=4)


@pytest.fixture(autouse=True)
def fewer_greedy_steps(monkeypatch):  # noqa: ANN001, ANN201
    """The greedy comparisons are tests/test_gguf.py's; here a few keep the exports quick."""
    from headprune.exporter import pipeline

    monkeypatch.setattr(pipeline, "GREEDY_PROMPTS", 4)
    monkeypatch.setattr(pipeline, "GREEDY_STEPS", 6)


HEADS = "L0.H1,L3.H0,L3.H1"  # L3 loses a whole key/value group


@pytest.mark.parametrize(("layout", "gguf_type"), [("sliced", "q4_k_m"), ("dense", "q5_k_m"), ("sliced", "q6_k")])
def test_k_quant_file_is_llama_cpps_and_runs_there(wide, layout, gguf_type, tmp_path) -> None:
    record = export(wide, HEADS, format="gguf", layout=layout, verify_task=choice_task(), out=tmp_path / "g",
                    gguf_type=gguf_type)
    info = Gguf.details(record)
    name = f"model-{gguf_type.upper()}.gguf"
    assert info.file == name and sorted(p.name for p in (tmp_path / "g").iterdir()) == [
        "README.md", "headprune_export.json", name]
    reader, meta = gguf_metadata(tmp_path / "g" / name)
    stored = {t.name: t.tensor_type.name for t in reader.tensors}
    assert meta["general.file_type"] == gguf_quant.K_QUANTS[gguf_type][0]
    columns = {t.name: (len(t.shape), int(t.shape[0])) for t in reader.tensors}  # GGUF shapes start at ne[0]
    heads = info.head_count
    assert stored == tensor_types(columns, gguf_type, arch=info.architecture, n_layer=4, n_head=heads[0],
                                  n_head_kv=info.head_count_kv[0], block=BLOCKS.get)
    default = gguf_quant.K_QUANTS[gguf_type][1]
    # 4 layers: use_more_bits for layers 2 and 3 (the _M mixtures give their attn_v and ffn_down Q6_K)
    assert stored["blk.1.attn_q.weight"] == stored["blk.1.ffn_down.weight"] == default
    assert stored["blk.3.ffn_down.weight"] == stored["blk.2.attn_v.weight"] == "Q6_K"
    # The bytes de-quantise (gguf-py's own decoder) to the float tensors within the type's rounding.
    assert 0 < info.read_back_max_abs_diff < 0.05
    q = info.quantized
    assert q.gguf_type == gguf_type and q.bytes == (tmp_path / "g" / name).stat().st_size < q.float_bytes / 4
    assert q.original_bytes > 0 and 0 < q.rms_diff <= q.allowed == 3 * q.reference_rms
    assert q.task == "mixed-choice" and q.n == 12 and q.change is not None and q.change.n == 12
    assert q.pruned == q.change.accuracy_after and q.original == q.change.accuracy_before
    assert sum(q.tensor_types.values()) == len(stored)
    card = (tmp_path / "g" / "README.md").read_text()
    assert f"both in {gguf_type}: original {q.original:.2%}, pruned {q.pruned:.2%}" in card
    assert "Whether a gain survives quantization" in card and f"`{gguf_type}` file: {q.bytes:,} bytes" in card


def test_a_file_llama_cpp_reads_otherwise_than_written_is_refused(wide, tmp_path, monkeypatch) -> None:
    """The logit gate: bytes changed after they were read back (the output matrix's quantized rows reversed in the
    written file) are what llama.cpp runs, and its logits leave the float32 file's by more than the rounding of the
    weights read back explains; nothing is written."""
    import gguf

    write = Gguf.write

    def corrupted(self, job, staging, scratch):  # noqa: ANN001, ANN202
        written = write(self, job, staging, scratch)
        reader = gguf.GGUFReader(str(written.files.path), "r+")
        tensor = next(t for t in reader.tensors if t.name == "output.weight")
        assert tensor.tensor_type.name == "Q6_K"
        tensor.data[:] = np.array(tensor.data)[::-1]
        del reader
        return written

    monkeypatch.setattr(Gguf, "write", corrupted)
    _refused(wide, tmp_path / "g", r"q4_k_m file's logits differ from the float32 file's by .* \(root mean square; "
                                   r"allowed .*: 3 x the .* its rounded weights make in torch")


def test_bytes_that_are_not_the_weights_rounded_are_refused_when_read_back(wide, tmp_path, monkeypatch) -> None:
    """The read-back gate: a quantizer fault (one ffn_down's rows quantized in reverse order) leaves the stored
    values farther from the weights than the type's rounding can (gguf-py's own decoder reads them)."""
    quantize = gguf_quant.quantize

    def reversed_rows(binding, data, type_name):  # noqa: ANN001, ANN202
        return quantize(binding, data[::-1] if data.shape == (256, 512) else data, type_name)

    monkeypatch.setattr(gguf_quant, "quantize", reversed_rows)
    _refused(wide, tmp_path / "g", r"GGUF file's Q4_K tensor blk\.0\.ffn_down\.weight differs from the pruned "
                                   r"weights by .* more than Q4_K's rounding allows \(0\.15\)")


def _refused(wide, out, match: str) -> None:  # noqa: ANN001
    """A sliced q4_k_m export of ``wide`` is refused with ``match`` and writes nothing."""
    with pytest.raises(VerificationError, match=match):
        export(wide, HEADS, format="gguf", layout="sliced", verify_task=choice_task(), out=out, gguf_type="q4_k_m")
    assert not out.exists()


def test_cli_prints_sizes_the_gate_and_the_task_after_quantization(wide, tmp_path) -> None:
    save_folder(wide.model, wide.tokenizer, tmp_path / "m")
    task = tmp_path / "t.jsonl"
    task.write_text("".join(json.dumps({"prompt": e.prompt, "choices": list(e.choices), "answer": e.answer}) + "\n"
                            for e in choice_task().examples))
    result = invoke("export", str(tmp_path / "m"), "--heads", HEADS, "--format", "gguf", "--gguf-type", "q4_k_m",
                    "--verify-task", str(task), "--out", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    q = Gguf.details(read_record(tmp_path / "o")).quantized
    assert f"q4_k_m: {q.bytes:,} bytes (float32 {q.float_bytes:,}; the original in q4_k_m {q.original_bytes:,})" \
        in result.output
    assert f"q4_k_m gate in llama.cpp: logits to the float32 GGUF {q.rms_diff:.3g} root mean square <= " \
        f"{q.allowed:.3g} (3 x {q.reference_rms:.3g}" in result.output
    assert "in llama.cpp, both in q4_k_m: original" in result.output
    assert "model-Q4_K_M.gguf" in result.output.splitlines()[-1]


def test_k_quants_need_llama_cpps_quantizer_exit_2(wide, tmp_path, monkeypatch) -> None:
    from headprune.exporter.llama_cpp import binding as llama_cpp_binding

    save_folder(wide.model, wide.tokenizer, tmp_path / "m")
    monkeypatch.setattr(llama_cpp_binding, "runtime_version", lambda: (None, "llama.cpp is not installed (test)"))
    result = invoke("export", str(tmp_path / "m"), "--heads", "L0.H1", "--format", "gguf", "--gguf-type", "q6_k",
                    "--out", str(tmp_path / "o"))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "made by llama.cpp's own quantizer" in lines[0] and "Traceback" not in result.output
    assert not (tmp_path / "o").exists()


def test_quantize_is_llama_cpps_ggml_quantize_chunk() -> None:
    """The stored bytes are ggml_quantize_chunk's: a row of Q8_0 holds each 32-value block's scale (f16, max |x| /
    127) and its values rounded to int8, as ggml's reference quantizer defines it."""
    binding = gguf_quant.quantizer_library()
    data = np.linspace(-1.0, 1.0, 64, dtype=np.float32).reshape(1, 64)
    out = gguf_quant.quantize(binding, data, "Q8_0")
    assert out.shape == (1, 2 * (2 + 32))
    block = out[0, :34]
    scale = block[:2].view(np.float16)[0]
    assert scale == np.float16(np.abs(data[0, :32]).max() / 127)
    assert np.array_equal(block[2:].view(np.int8), np.round(data[0, :32] / (np.abs(data[0, :32]).max() / 127)))
    with pytest.raises(KeyError):
        gguf_quant.quantize(binding, data, "Q9_9")
    assert gguf_export.file_name("q4_k_m") == "model-Q4_K_M.gguf" and gguf_export.file_name("f32") == "model.gguf"


@pytest.mark.usefixtures("ctrl_c_delivered")
def test_ctrl_c_while_llama_cpp_logs_stops_the_export_before_its_move(wide, tmp_path) -> None:
    """A Ctrl-C that arrives while llama.cpp runs Python's log callback (it loads the quantized file for the gate):
    ctypes drops an exception raised there, and the export used to run on and move its output into place. Now it
    stops within a second, exit 130, and nothing is written."""
    import signal
    import time

    from headprune.exporter.llama_cpp.binding import library

    save_folder(wide.model, wide.tokenizer, tmp_path / "m")
    binding, sent = library(), []

    class CtrlC(list):  # the log the callback appends to: the user presses Ctrl-C at its first line
        def append(self, line: object) -> None:
            if not sent:
                sent.append(time.perf_counter())
                signal.raise_signal(signal.SIGINT)
            super().append(line)

    real, binding.log = binding.log, CtrlC()
    try:
        result = invoke("export", str(tmp_path / "m"), "--heads", HEADS, "--format", "gguf", "--gguf-type", "q4_k_m",
                        "--out", str(tmp_path / "o"))
        took = time.perf_counter() - sent[0]
    finally:
        binding.log = real
    assert result.exit_code == 130 and result.stderr.splitlines()[-1] == "headprune: interrupted", result.output
    assert took < 1.0, took
    assert not (tmp_path / "o").exists() and [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []
