"""The extension points share one registry type: a name claimed twice is an error, an unknown name lists the
available ones."""

from __future__ import annotations

import pytest

from headprune.core.registry import Registry


def test_a_name_registered_twice_is_an_error_and_the_first_stays() -> None:
    formats = Registry("export format", {"safetensors": 1})
    with pytest.raises(ValueError, match="export format 'safetensors' is registered twice: 1 and 2"):
        formats.add("safetensors", 2)
    assert formats["safetensors"] == 1 and list(formats) == ["safetensors"]
    with pytest.raises(ValueError, match="registered twice"):
        Registry("model type", {"llama": 1}).add("llama", 1)  # even the same thing twice: a copy-paste slip


def test_an_unknown_name_lists_the_available_ones() -> None:
    tasks = Registry("built-in task", {"arithmetic": 1, "sentiment": 2})
    with pytest.raises(KeyError, match="unknown built-in task 'mmlu'; available: arithmetic, sentiment"):
        tasks["mmlu"]
    assert "mmlu" not in tasks and tasks.get("mmlu") is None and len(tasks) == 2 and tasks.values() == [1, 2]


def test_every_extension_point_is_a_registry_and_refuses_a_second_claim() -> None:
    from dataclasses import replace

    from headprune.exporter.formats.base import REGISTRY, register
    from headprune.loading.adapters import FAMILIES
    from headprune.loading.adapters.family import register as register_family
    from headprune.scoring import _SCORERS
    from headprune.search.find import OBJECTIVE_RUNS
    from headprune.tasks.builtin import BUILTIN_TASKS
    from headprune.tasks.kinds import KINDS

    for registry in (REGISTRY, FAMILIES, _SCORERS, OBJECTIVE_RUNS, BUILTIN_TASKS, KINDS):
        assert isinstance(registry, Registry), registry
    assert set(REGISTRY) == {"safetensors", "onnx", "gguf"} and "llama" in FAMILIES
    assert ("choice", "causal") in _SCORERS and set(OBJECTIVE_RUNS) == {"improve", "compress"}

    class Another(REGISTRY["onnx"]):  # a second class calling itself onnx
        name = "onnx"

    with pytest.raises(ValueError, match="export format 'onnx' is registered twice"):
        register(Another)
    assert REGISTRY["onnx"] is not Another
    with pytest.raises(ValueError, match="model type 'llama' is registered twice"):  # a second family file claiming it
        register_family(replace(FAMILIES["qwen2"], model_type="llama"))
    assert FAMILIES["llama"].model_type == "llama"


def test_an_unknown_qkv_layout_is_refused_where_the_adapter_is_declared() -> None:
    from dataclasses import replace

    from headprune.loading.adapters.llama import LLAMA
    from headprune.surgery.remote_modeling import QKV_LAYOUTS

    for layout in QKV_LAYOUTS:
        assert replace(LLAMA, qkv_layout=layout).qkv_layout == layout
    with pytest.raises(ValueError, match="unknown qkv_layout 'bloom'; known: separate, gpt2, neox"):
        replace(LLAMA, qkv_layout="bloom")  # was sliced as NeoX's without a word
