"""scripts/bench/gpu_check.py, the one command for a lent GPU, run end to end on the CPU at a tiny size."""

from __future__ import annotations

import json

import pytest

from scripts.bench import gpu_check


@pytest.mark.slow
def test_gpu_check_runs_every_stage_and_both_contracts(tmp_path) -> None:
    report = gpu_check.main(["--configs", "tiny", "--layers", "2", "--n", "6", "--conditions", "2", "--device", "cpu",
                             "--json", str(tmp_path / "check.json")])
    assert json.loads((tmp_path / "check.json").read_text()) == report
    assert report["device"] == "CPU" and report["measured_bf16_matmul_tflops"] > 0
    (config,) = report["results"]
    stages = [row["stage"] for row in config["rows"]]
    for kind in ("choice", "generate"):
        assert {f"{kind}: baseline", f"{kind}: screen (2 heads)", f"{kind}: joint (1 pairs)"} <= set(stages)
        assert config[f"{kind}_fast_path_contract"] == "holds"
        assert config[f"{kind}_vs_float32"].startswith("holds")
    assert "choice: attribution (every head)" in stages and stages[-1] == "export: sliced safetensors, verified"
    for row in config["rows"][:-1]:
        assert row["seconds"] > 0 and row["examples_per_s"] > 0 and row["tokens_per_s"] > 0
        assert 0 < row["of_measured_peak"] and row["peak_memory_gib"] > 0
    export = config["rows"][-1]
    assert export["parameters_after"] < config["parameters"] and export["max_abs_logit_diff"] >= 0
