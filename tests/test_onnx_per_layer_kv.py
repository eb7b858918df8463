"""ONNX exports whose sliced layers keep different key/value head counts: written sliced where the installed ONNX
Runtime GenAI runs such a decoder (decided by running one), checked in GenAI; else the dense layout, said in the
record, the CLI's lines and the card."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import build_tiny, choice_task, save_folder
from helpers.extras import needs

from helpers.cli import invoke
from headprune.exporter import export, read_record
from headprune.exporter.onnx import genai_probe
from headprune.heads import parse_heads
from headprune.surgery.ablation import ablated

HEADS = "L0.H2,L1.H0,L1.H1"  # layer 1 loses a whole key/value group: the sliced layers keep 2 and 1


@pytest.fixture(scope="module")
def llama(tokenizer):  # noqa: ANN001, ANN201
    needs("onnx", "onnxruntime", "onnxscript", "onnxruntime_genai", extra="onnx")
    return build_tiny("llama", tokenizer, seed=3)


def test_the_probe_runs_genai_and_says_what_it_found() -> None:
    needs("onnx", "onnxruntime", "onnxscript", "onnxruntime_genai", extra="onnx")
    import onnxruntime_genai as og

    runs, why = genai_probe.per_layer_kv_heads()
    assert f"ONNX Runtime GenAI {og.__version__}" in why
    assert ("decoded like torch" in why) == runs
    assert genai_probe.per_layer_kv_heads() == (runs, why)  # one probe a process


def test_uneven_key_value_heads_follow_what_genai_runs(llama, tmp_path) -> None:
    from headprune.exporter.runtimes import GenaiRunner

    runs, why = genai_probe.per_layer_kv_heads()
    record = export(llama, HEADS, format="onnx", verify_task=choice_task(), out=tmp_path / "onnx")
    genai = json.loads((tmp_path / "onnx" / "genai_config.json").read_text())
    if not runs:  # the dense fallback, and why
        assert record.layout == "dense" and why in record.layout_note and "dense, not the sliced" in record.layout_note
        return
    assert record.layout == "sliced" and record.layout_note.startswith("sliced with per-layer key/value heads [2, 1]")
    import onnx

    graph = onnx.load(str(tmp_path / "onnx" / "model.onnx"), load_external_data=False).graph
    dims = {i.name: i.type.tensor_type.shape.dim[1].dim_value for i in graph.input if i.name.startswith("past_")}
    assert dims["past_key_values.0.key"] == 2 and dims["past_key_values.1.value"] == 1
    # The cache GenAI gives this decoder: a float32 buffer per past input of the written graph, at a 4k context.
    widths = [i.type.tensor_type.shape.dim[1].dim_value * i.type.tensor_type.shape.dim[3].dim_value
              for i in graph.input if i.name.startswith("past_")]
    cache = record.format_details
    assert cache["kv_bytes"] == sum(widths) * 4096 * 4 and cache["context"] == 4096
    assert cache["original_kv_bytes"] == 2 * llama.grid.num_layers * llama.grid.num_kv_heads * llama.grid.head_dim * \
        4096 * 4 and cache["kv_bytes"] == cache["original_kv_bytes"] * 3 // 4  # 2 + 1 of 2 + 2 key/value heads
    assert f"{cache['kv_bytes']:,} bytes against the original's {cache['original_kv_bytes']:,} (0.750x)" in \
        (tmp_path / "onnx" / "README.md").read_text()
    assert genai["model"]["decoder"]["num_key_value_heads"] == 2
    checked = record.verification.runtime  # the export's gate ran GenAI on the sliced folder
    assert checked.done and checked.identical == checked.prompts and checked.mismatches == 0
    heads = parse_heads(HEADS)
    runner = GenaiRunner(tmp_path / "onnx")
    for prompt in ([5, 17, 33, 60, 7], [9, 4, 120, 3]):
        with torch.inference_mode(), ablated(llama, heads):
            want = llama.model.generate(torch.tensor([prompt]), max_new_tokens=10, do_sample=False,
                                        eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
        got, _ = runner.greedy(prompt, 10)
        assert got == want[:len(got)] and got


def test_without_per_layer_support_the_dense_layout_is_written_and_said(llama, tokenizer, tmp_path,
                                                                        monkeypatch) -> None:
    monkeypatch.setattr(genai_probe, "per_layer_kv_heads", lambda: (False, "ONNX Runtime GenAI X cannot (test)"))
    save_folder(llama.model, tokenizer, tmp_path / "m")
    task = tmp_path / "t.jsonl"
    task.write_text("".join(json.dumps({"prompt": e.prompt, "choices": list(e.choices), "answer": e.answer}) + "\n"
                            for e in choice_task().examples))
    result = invoke("export", str(tmp_path / "m"), "--heads", HEADS, "--format", "onnx", "--verify-task", str(task),
                    "--out", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    record = read_record(tmp_path / "o")
    assert record.layout == "dense" and record.layers == ()
    note = "dense, not the sliced layout asked for, whose layers would keep [2, 1] key/value heads: ONNX Runtime " \
           "GenAI X cannot (test)"
    assert record.layout_note == note and f"layout: {note}" in result.output
    assert result.stdout.splitlines()[0].startswith(f"removed {HEADS} (dense, zero)")
    assert f"Layout written: {note}." in (tmp_path / "o" / "README.md").read_text()
    # The dense layout keeps every key/value head: the cache is the original's, and the CLI says so.
    cache = record.format_details
    assert cache["kv_bytes"] == cache["original_kv_bytes"] > 0
    assert "size in ONNX Runtime GenAI: key/value cache at a 4,096-token context (float32) " \
           f"{cache['kv_bytes']:,} bytes against the original's {cache['kv_bytes']:,} (1.000x)" in result.output
