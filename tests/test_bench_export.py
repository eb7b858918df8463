"""scripts/bench/export.py on a tiny random Llama: the table's rows come from running each runtime itself."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import build_tiny, random_choice_task, save_folder

from headprune.exporter.gguf import writer as gguf_export
from headprune.exporter.onnx.genai_probe import per_layer_kv_heads
from headprune.heads import HeadGrid
from headprune.tasks import write_jsonl_task
from scripts.bench import export as bench


@pytest.fixture(scope="module")
def bench_inputs(tmp_path_factory, tokenizer):  # noqa: ANN001, ANN201
    """The benchmark's inputs: a tiny Llama in ``m`` and a six-example task ``t.jsonl`` (not conftest's tiny_folder)."""
    folder = tmp_path_factory.mktemp("bench")
    lm = build_tiny("llama", tokenizer, seed=3)  # 2 layers x 4 query heads over 2 KV heads
    save_folder(lm.model, tokenizer, folder / "m")
    write_jsonl_task(random_choice_task(6, seed=1), folder / "t.jsonl")
    return folder


def _args(folder: Path, runtimes: str) -> list[str]:
    # Realistic: a whole KV group of layer 1 and a single head of layer 0; heavy: the fixed rule (L0's group 0).
    return ["--model", str(folder / "m"), "--heads", "L1.H0,L1.H1,L0.H3", "--tasks", str(folder / "t.jsonl"),
            "--prompts", "2", "--new-tokens", "3", "--repeats", "1", "--warmup", "1", "--verify-limit", "2",
            "--threads", "1", "--runtimes", runtimes, "--json", str(folder / f"{runtimes}.json")]


def _cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def test_bench_runs_torch_and_llama_cpp_and_prints_positive_speeds(bench_inputs, capsys) -> None:
    lines = bench.main(_args(bench_inputs, "torch,llama.cpp"))
    printed = capsys.readouterr().out
    assert all(line in printed for line in lines)
    record = json.loads((bench_inputs / "torch,llama.cpp.json").read_text())
    assert record["bench"] == "export" and [dict(zip(_cells(lines[0]), _cells(line))) for line in lines[1:]] == [
        {k: v for k, v in row.items() if k != "note"} for row in record["results"]]
    header, rows = _cells(lines[0]), [dict(zip(_cells(lines[0]), _cells(line))) for line in lines[1:]]
    assert header[-4:] == ["prompt tok/s", "decode tok/s", "x prompt", "x decode"]
    assert [(r["runtime"].split()[0], r["model"]) for r in rows] == [
        (runtime, model) for runtime in ("torch", "llama.cpp")
        for model in ("original", "realistic (3 heads)", "heavy (2 heads)")]
    for row in rows:
        for column in ("prompt tok/s", "decode tok/s", "x prompt", "x decode", "file MiB"):
            assert float(row[column]) > 0, (row, column)
    for runtime in ("torch", "llama.cpp"):
        original, *pruned = [r for r in rows if r["runtime"].startswith(runtime)]
        assert original["x prompt"] == original["x decode"] == "1.00"
        params = int(original["parameters"].replace(",", ""))
        for row in pruned:  # each prune drops a whole KV group: fewer parameters in the file that ran
            assert int(row["parameters"].replace(",", "")) < params
    torch_rows = [r for r in rows if r["runtime"].startswith("torch")]
    assert [r["layout"] for r in torch_rows] == ["-", "sliced", "sliced"]
    assert all(int(r["KV B/tok"].replace(",", "")) < int(torch_rows[0]["KV B/tok"].replace(",", ""))
               for r in torch_rows[1:])
    assert [r["layout"] for r in rows if r["runtime"].startswith("llama.cpp")] == [
        "llama", "sliced (deci)", "sliced (deci)"]


def test_a_runtime_that_cannot_be_imported_is_a_row_that_says_why(bench_inputs, capsys, monkeypatch) -> None:
    monkeypatch.setattr(gguf_export, "llama_cpp_version", lambda: (None, "llama-cpp-python is not importable (test)"))
    lines = bench.main(_args(bench_inputs, "llama.cpp"))
    assert len(lines) == 2 and "not available: llama-cpp-python is not importable (test)" in lines[1]


def test_heavy_rule_takes_a_quarter_in_whole_groups_and_leaves_every_layer_heads() -> None:
    grid = HeadGrid.uniform(30, 9, 3, 64)  # SmolLM2-135M
    heads = bench.heavy_heads(grid)
    assert len(heads) == 67
    per_layer = {}
    for head in heads:
        per_layer.setdefault(head.layer, set()).add(head.head)
    whole = [layer for layer, hs in per_layer.items() if len(hs) == 3 and len({h // 3 for h in hs}) == 1]
    assert len(whole) == 22 and all(len(hs) < 9 for hs in per_layer.values())


@pytest.mark.slow  # three ONNX exports with a key/value cache (about half a minute)
def test_bench_runs_onnx_runtime_genai_and_says_which_layout_it_got(bench_inputs) -> None:
    lines = bench.main(_args(bench_inputs, "onnx-genai"))
    rows = [dict(zip(_cells(lines[0]), _cells(line))) for line in lines[1:]]
    assert [r["model"] for r in rows] == ["original", "realistic (3 heads)", "heavy (2 heads)"]
    assert all(r["runtime"].startswith("ONNX Runtime GenAI") for r in rows)
    assert all(float(r[c]) > 0 for r in rows for c in ("prompt tok/s", "decode tok/s", "x prompt", "x decode"))
    # Both prunes leave the layers with different KV head counts: sliced where the installed GenAI runs that (its
    # probe), else the dense fallback, said in the line.
    runs, why = per_layer_kv_heads()
    assert [r["layout"] for r in rows] == ["dense"] + ["sliced" if runs else "dense"] * 2
    assert all(("fallback" in line and why in line) != runs for line in lines[2:])


def test_long_prompts_are_the_texts_tokens_one_after_another() -> None:
    prompts = [[1, 2, 3], [4, 5], [6]]
    long = bench.long_prompts(prompts, 8)
    assert long == [[1, 2, 3, 4, 5, 6, 1, 2], [4, 5, 6, 1, 2, 3, 4, 5], [6, 1, 2, 3, 4, 5, 6, 1]]


def test_bench_decodes_after_a_long_context_in_llama_cpp(bench_inputs) -> None:
    lines = bench.main(_args(bench_inputs, "llama.cpp") + ["--context", "96", "--gguf-type", "q8_0"])
    rows = [dict(zip(_cells(lines[0]), _cells(line))) for line in lines[1:]]
    assert [r["model"] for r in rows] == ["original", "realistic (3 heads)", "heavy (2 heads)"]
    assert all(float(r[c]) > 0 for r in rows for c in ("prompt tok/s", "decode tok/s"))
    record = json.loads((bench_inputs / "llama.cpp.json").read_text())
    assert record["settings"]["context"] == 96 and "(q8_0)" in rows[0]["runtime"]
