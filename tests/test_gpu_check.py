"""scripts/bench/gpu_check.py, the one command for a GPU, run end to end on the CPU at a tiny size: every part
timed with its peak memory, the work counted against the roofline, the export's parts, and ``--protocol``."""

from __future__ import annotations

import json
from math import comb

import pytest
import torch

from scripts.bench import gpu_check
from scripts.bench.gpu_parts import DECODE_TOKENS, Ceilings, counted


def _tiny_llama(layers: int = 3):  # noqa: ANN202
    from headprune.loading.models import wrap_model
    from headprune.testing import bpe_tokenizer, llama_config, random_llama

    return wrap_model(random_llama(llama_config("tiny", layers), torch.float32), bpe_tokenizer(), name="tiny")


def test_the_work_of_a_forward_pass_and_of_decoding_steps_is_counted_from_the_layers_that_ran() -> None:
    lm = _tiny_llama()
    grid, hidden = lm.grid, lm.model.config.hidden_size
    layer_params = [sum(p.numel() for p in layer.parameters()) for layer in lm.adapter.layers(lm.model)]
    head = lm.model.get_output_embeddings().weight
    ceilings = Ceilings("test", tflops=1.0, bandwidth_gbs=1.0, datasheet_tflops=None)
    ids = torch.randint(2, 300, (2, 5))
    with torch.no_grad(), counted(lm, ceilings) as work:
        lm.model(input_ids=ids)
    rows, tokens = 2, 5
    attention = 4.0 * rows * tokens * tokens * grid.num_heads * grid.head_dim  # scores and values, 5 keys each
    want = sum(2.0 * p * rows * tokens + attention for p in layer_params) + 2.0 * head.numel() * rows * tokens
    assert work.calls == grid.num_layers + 1 and work.flop == pytest.approx(want)
    assert work.decode_steps == grid.num_layers  # 5 tokens a row is within DECODE_TOKENS: one step per layer
    assert tokens <= DECODE_TOKENS
    weights = 4.0 * (sum(layer_params) + head.numel())  # float32: every weight read once
    assert work.bytes > weights and work.limit_s >= max(work.flop / 1e12, work.bytes / 1e9) * 0.999
    # Decoding from a cache: each step reads every cached key and value of every layer.
    from headprune.core.compat import cache_of, passing_cache

    with torch.no_grad():
        past = cache_of(lm.model(input_ids=torch.randint(2, 300, (1, 40)), use_cache=True))
        with counted(lm, ceilings) as step:
            lm.model(input_ids=torch.randint(2, 300, (1, 1)), **passing_cache(past), use_cache=True)
    kv = 2 * grid.num_kv_heads * grid.head_dim * 41 * 4  # 40 cached tokens and the new one, float32
    assert step.decode_steps == grid.num_layers
    assert step.bytes == pytest.approx(4.0 * (sum(layer_params) + 2 * hidden * grid.num_layers) + kv * grid.num_layers
                                       + 4.0 * head.numel() + 4.0 * head.shape[0])


@pytest.mark.slow
def test_gpu_check_times_every_part_and_both_contracts(tmp_path, capsys) -> None:
    report = gpu_check.main(["--configs", "tiny", "--layers", "2", "--n", "6", "--conditions", "2", "--device", "cpu",
                             "--json", str(tmp_path / "check.json")])
    assert json.loads((tmp_path / "check.json").read_text()) == report
    assert report["device"] == "CPU" and report["measured_bf16_matmul_tflops"] > 0
    assert report["measured_bandwidth_gbs"] > 0
    (config,) = report["results"]
    parts = {row["part"]: row for row in config["rows"]}
    assert "tiny: build (random weights, bfloat16)" in parts
    for kind in ("choice", "generate"):
        for name in ("setup (tokenize, plan batches)", "baseline", "screen (2 heads)", "joint (1 pairs)",
                     "contract: plain forward (L0.H1)", "contract: float32 reference (L0.H1)"):
            assert f"{kind}: {name}" in parts, name
        assert config[f"{kind}_fast_path_contract"] == "holds"
        assert config[f"{kind}_vs_float32"].startswith("holds")
        assert "0.05 x max(1, |margin|)" in config[f"{kind}_tolerances"]
        for name in ("baseline", "screen (2 heads)"):
            row = parts[f"{kind}: {name}"]
            assert row["examples_per_s"] > 0 and row["of_measured_peak"] > 0 and row["of_limit"] > 0
    assert parts["generate: baseline"]["decode_steps"] > 0 and parts["generate: baseline"]["decode_limit_s"] > 0
    assert "choice: attribution (every head)" in parts
    export = [row for row in config["rows"] if row["part"].startswith("export: ")]
    assert [row["part"].removeprefix("export: ") for row in export[1:]] == [
        "slicing", "writing", "verification: tensors", "verification: logits", "verification: task",
        "runtime check", "other (plan, card, hashes, record, move)"]
    assert sum(row["seconds"] for row in export[1:]) == pytest.approx(export[0]["seconds"], rel=0.01, abs=1e-3)
    assert all(row["seconds"] >= 0 and row["peak_memory_gib"] > 0 for row in config["rows"])
    figures = config["export"]
    assert figures["parameters_after"] < config["parameters"] and figures["max_abs_logit_diff"] <= figures["allowed"]
    assert figures["tolerance"] == 2e-2 and figures["dtype"] == "bfloat16"
    printed = capsys.readouterr().out
    assert "<= allowed" in printed and "tolerance 0.02" in printed and "of limit" in printed


SMALL = ["--protocol", "--shape", "tiny", "--discovery", "12", "--heldout", "8", "--words", "6,3,2", "--nominees", "4",
         "--finalists", "3", "--candidates", "5", "--device", "cpu"]


def test_protocol_projects_every_condition_of_the_paper_from_sampled_layers(tmp_path) -> None:
    report = gpu_check.main([*SMALL, "--sample", "2", "--json", str(tmp_path / "p.json")])
    (result,) = report["results"]
    assert result["conditions"] == {"screen": 8, "joint": comb(4, 2) + comb(4, 3), "finalists_heldout": 3,
                                    "candidates": 5}
    assert result["sampled"] and set(result["checks"]) == {"pair", "triple", "held-out finalist"}
    rows = {row["part"]: row["seconds"] for row in result["rows"]}
    layer0, layer1 = rows["protocol: screen condition at layer 0 (L0.H0)"], rows["protocol: screen condition at "
                                                                                   "layer 1 (L1.H3)"]
    stages = result["stage_seconds"]
    assert stages["screen"] == pytest.approx(4 * (layer0 + layer1), rel=1e-3)  # 4 heads a layer
    fixed = sum(rows[f"protocol: {name}"] for name in ("setup (tokenize, plan batches)", "baseline, discovery",
                                                       "baseline, held-out"))
    exact = fixed + stages["screen"] + stages["joint"] + stages["finalists"]
    assert result["total_minutes"]["exact"] == pytest.approx(exact / 60, rel=1e-3)
    assert result["limit_minutes_at_peak"]["context once"] < result["limit_minutes_at_peak"]["as computed"]
    assert result["tokens_per_example_context_once"] < result["tokens_per_example_computed"]


def test_protocol_runs_every_condition_when_not_sampled(tmp_path) -> None:
    report = gpu_check.main([*SMALL, "--sample", "0", "--json", str(tmp_path / "p.json")])
    (result,) = report["results"]
    rows = {row["part"]: row["seconds"] for row in result["rows"]}
    assert not result["sampled"] and result["checks"] == {}
    stages = {"protocol: screen (8 heads)", "protocol: joint (10 sets)", "protocol: finalists on held-out (3)"}
    assert stages <= set(rows)
    # Each stage's total is its conditions' own times, within the stage's whole time.
    assert result["stage_seconds"]["screen"] <= rows["protocol: screen (8 heads)"] * 1.001
    assert result["stage_seconds"]["joint"] <= rows["protocol: joint (10 sets)"] * 1.001


def test_targets_report_what_was_measured_and_what_was_not(tmp_path) -> None:
    from scripts.bench import gpu_targets

    gpu_check.main([*SMALL, "--sample", "2", "--json", str(tmp_path / "protocol.json")])
    (tmp_path / "main_job.jsonl").write_text('{"dtype": "bfloat16", "rc": 0, "find_wall_s": 30.0}\n'
                                             '{"dtype": "float32", "rc": 1, "find_wall_s": 24.0}\n')
    lines = gpu_targets.report(tmp_path).splitlines()
    assert lines[0].startswith("GPU targets: CPU, torch ")
    said = {line.split(":")[0].strip(): line for line in lines[1:] if not line.startswith("      ")}
    assert ": MET (target <= 25" in said["exact protocol at 3B (min)"]  # a tiny model's protocol: seconds
    assert "NOT MET (target <= 1; worst 1.25)" in said["main job find, bfloat16 over float32 (warm)"]
    assert said["full 8B sliced export + verification (s)"].endswith("not measured (see the logs)")
    assert said["baseline (of peak)"].endswith("not measured (see the logs)")  # no gpu_check record here
