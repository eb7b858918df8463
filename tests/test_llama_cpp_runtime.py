"""headprune's ctypes binding to llama.cpp (the pinned xllamacpp build): its struct layouts match the build, a
wrong layout is caught, and the fields it sets reach llama.cpp (read back through llama.cpp's own getters).

Fails (never skips) without the pinned xllamacpp: GGUF exports are not tested without llama.cpp.
"""

from __future__ import annotations

import ctypes
from importlib import metadata

import pytest
import torch
from helpers import build_tiny

from headprune.exporter import gguf_export, llama_cpp_runtime as rt


@pytest.fixture(scope="module")
def lib():  # noqa: ANN201
    version, reason = rt.runtime_version()
    if version is None:
        pytest.fail(f"llama.cpp is needed: {reason}")
    return rt.library()


def test_the_pinned_build_is_installed_and_its_layouts_match(lib) -> None:
    assert metadata.version("xllamacpp") == rt.PINNED
    assert rt.layout_problems(lib) == []
    assert ctypes.sizeof(rt.ContextParams) == 168 and ctypes.sizeof(rt.ModelParams) == 80
    assert ctypes.sizeof(rt.Batch) == 56


def _shifted(base: type, drop: str) -> type:
    """``base`` with one opaque field's first 4 bytes removed: every later field sits 4 bytes early."""
    fields = []
    for name, kind in base._fields_:
        if name == drop:
            fields.append((name, kind._type_ * (kind._length_ - (4 // ctypes.sizeof(kind._type_)))))
        else:
            fields.append((name, kind))
    return type("Shifted", (ctypes.Structure,), {"_fields_": fields})


@pytest.mark.parametrize("drop", ["_opaque_16", "_opaque_112"])
def test_a_layout_off_by_one_field_is_caught(lib, drop) -> None:
    problems = rt.layout_problems(lib, context=_shifted(rt.ContextParams, drop))
    assert problems and any("llama_context" in p for p in problems)


def test_a_struct_of_the_wrong_size_is_caught(lib) -> None:
    small = type("Small", (ctypes.Structure,), {"_fields_": [("_opaque", ctypes.c_uint64 * 9)]})
    problems = rt.layout_problems(lib, model=small)
    assert any(p.startswith("llama_model_default_params writes 7") for p in problems), problems


@pytest.fixture(scope="module")
def tiny_gguf(tokenizer, tmp_path_factory):  # noqa: ANN001, ANN201
    lm = build_tiny("llama", tokenizer, seed=3)
    folder = tmp_path_factory.mktemp("gguf")
    arch = gguf_export.check_supported(lm, "dense", "f32")
    return lm, gguf_export.write_files(lm, lm.model, arch, None, folder, folder, "f32").path


def test_the_context_fields_set_reach_llama_cpp(lib, tiny_gguf) -> None:
    _, path = tiny_gguf
    llm = rt.LlamaCpp(path, n_ctx=256, threads=1)  # llama.cpp pads n_ctx to a multiple of 256
    try:
        assert lib.llama_n_ctx(llm.ctx) == 256 and lib.llama_n_batch(llm.ctx) == 256  # defaults: 512, 2048
        assert lib.llama_n_ubatch(llm.ctx) == 256 and lib.llama_n_threads(llm.ctx) == 1  # 512, 4
    finally:
        llm.close()


def test_float32_cache_is_what_llama_cpp_uses(tiny_gguf) -> None:
    """type_k/type_v reach llama.cpp: its float32 cache gives torch's logits to rounding, its default f16 cache
    does not (keys and values rounded to 11 bits); positions past one batch continue the sequence."""
    lm, path = tiny_gguf
    with torch.no_grad():
        q, k = lm.model.model.layers[0].self_attn.q_proj.weight, lm.model.model.layers[0].self_attn.k_proj.weight
        tokens = list(range(5, 45)) * 3
        want = lm.model(input_ids=torch.tensor([tokens])).logits[0].float()
    assert q.abs().max() > 0 and k.abs().max() > 0
    diffs = {}
    for kv_f32 in (True, False):
        llm = rt.LlamaCpp(path, n_ctx=256, kv_f32=kv_f32)
        llm.n_batch = 50  # three decode calls: positions and the cache carry across them
        try:
            got = torch.from_numpy(llm.eval(tokens, all_logits=True))
            assert llm.tokenize("the film") == list(lm.tokenizer("the film")["input_ids"])
        finally:
            llm.close()
        diffs[kv_f32] = float((got - want).abs().max())
    assert diffs[True] < 1e-5 and diffs[False] > 10 * diffs[True], diffs


def test_a_file_llama_cpp_refuses_is_a_value_error_with_its_reason(lib, tmp_path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 60)
    with pytest.raises(ValueError, match="could not load bad.gguf"):
        rt.LlamaCpp(bad, n_ctx=32)
