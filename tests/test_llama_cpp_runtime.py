"""headprune's ctypes binding to llama.cpp: the declarations are what scripts/llama_h_to_ctypes.py generates from
the kept headers, they match the installed build, a swap of two same-typed fields is caught, the fields set reach
llama.cpp, an unsupported xllamacpp release is refused before anything of it is loaded, and llama-cpp-python (where
it is installed) runs a file as xllamacpp does.

Fails (never skips) without xllamacpp: GGUF exports are not tested without llama.cpp.
"""

from __future__ import annotations

import ctypes
import importlib
import re
import subprocess
import sys
import types
from importlib import metadata
from pathlib import Path

import pytest
import torch
from helpers import build_tiny

from helpers.cli import invoke
from headprune.cli import exits
from headprune.errors import InternalCheckError, MissingExtraError
from headprune.exporter.gguf import families as gguf_families
from headprune.exporter.gguf import writer as gguf_export
from headprune.exporter.llama_cpp import binding as rt
from headprune.exporter.llama_cpp.runtime import LlamaCpp
from headprune.exporter.llama_cpp.decls import SUPPORTED

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "llama_h_to_ctypes.py"


@pytest.fixture(scope="module")
def binding():  # noqa: ANN201
    if "xllamacpp" not in rt.installed():
        pytest.fail("llama.cpp is needed: xllamacpp cannot be imported (pip install 'headprune[gguf]')")
    return rt.library("xllamacpp")


def _generator():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location("llama_h_to_ctypes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_declarations_are_what_the_script_generates_from_the_kept_headers() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(SUPPORTED) >= 2 and all((ROOT / "third_party" / "llama.cpp" / v / "llama.h").is_file()
                                       for v in SUPPORTED)


def test_a_field_moved_in_the_header_moves_in_the_declarations() -> None:
    """The generator reads the layout from the header: swapping two lines of llama.h swaps the two fields."""
    gen = _generator()
    folder = gen.HEADERS / max(SUPPORTED, key=rt._key)
    texts = [(folder / Path(k).name).read_text() for k in gen.KEPT]
    defaults = (folder / "llama_default_params.cpp").read_text()
    fields = {}
    for label, text in (("kept", texts[0]), ("swapped", re.sub(
            r"(enum ggml_type type_k;[^\n]*\n)(\s*enum ggml_type type_v;[^\n]*\n)", r"\2\1", texts[0]))):
        header = gen.Header([text, *texts[1:]])
        names = [name for name, _, _ in header.structs["llama_context_params"]]
        fields[label] = names
        gen.Generator(header).module("0.0.1", "b1", defaults, "test")  # still generates
    k, v = fields["kept"].index("type_k"), fields["kept"].index("type_v")
    assert v == k + 1 and fields["swapped"][k:v + 1] == ["type_v", "type_k"]


def test_the_installed_release_is_supported_and_matches_its_declarations(binding) -> None:
    assert metadata.version("xllamacpp") in SUPPORTED
    assert rt.problems(binding) == []
    decls = importlib.import_module(f"headprune.exporter.llama_cpp.decls.{SUPPORTED[metadata.version('xllamacpp')]}")
    assert ctypes.sizeof(decls.llama_batch) == 56 and binding.runtime.startswith(f"llama.cpp {decls.BUILD} ")


def _swapped_decls(first: str, second: str) -> types.ModuleType:
    """The installed release's declarations module with two fields' lines exchanged, as a hand edit would."""
    name = SUPPORTED[metadata.version("xllamacpp")]
    text = Path(importlib.import_module(f"headprune.exporter.llama_cpp.decls.{name}").__file__).read_text()
    lines = text.splitlines()
    i, j = (next(n for n, line in enumerate(lines) if line.lstrip().startswith(f'("{f}",')) for f in (first, second))
    assert lines[i].split(",")[1] == lines[j].split(",")[1]  # same ctypes type
    lines[i], lines[j] = lines[j], lines[i]
    module = types.ModuleType(f"swapped_{name}")
    exec(compile("\n".join(lines), module.__name__, "exec"), module.__dict__)  # noqa: S102
    return module


@pytest.fixture(scope="module")
def tiny_gguf(tokenizer, tmp_path_factory):  # noqa: ANN001, ANN201
    lm = build_tiny("llama", tokenizer, seed=3)
    folder = tmp_path_factory.mktemp("gguf")
    arch = gguf_families.check_supported(lm, "dense", "f32")
    return lm, gguf_export.write_files(lm, lm.model, arch, None, folder, folder, "f32").path


# Pairs of same-typed fields: different defaults (caught on load), or one of them set by headprune (caught when the
# context is made: attention_type and flash_attn_type both default to -1).
SWAPS = [("llama_context_params", "n_ctx", "n_batch"), ("llama_context_params", "rope_freq_base", "yarn_ext_factor"),
         ("llama_context_params", "embeddings", "offload_kqv"), ("llama_model_params", "n_gpu_layers", "main_gpu"),
         ("llama_context_params", "attention_type", "flash_attn_type"),
         ("llama_context_params", "type_k", "ctx_type")]


@pytest.mark.parametrize("struct, first, second", SWAPS)
def test_two_same_typed_fields_swapped_are_caught(binding, tiny_gguf, struct, first, second) -> None:
    swapped = rt._xllamacpp(decls=_swapped_decls(first, second))
    try:
        found = rt.checked(swapped)
    except InternalCheckError as error:
        assert first in str(error) or second in str(error), error
        return
    with pytest.raises(InternalCheckError, match=f"did not get what headprune set: .*({first}|{second})"):
        LlamaCpp(tiny_gguf[1], n_ctx=256, threads=1, binding=found)
    LlamaCpp(tiny_gguf[1], n_ctx=256, threads=1, binding=binding).close()  # the real one still works


def test_a_struct_of_the_wrong_size_is_caught(binding) -> None:
    small = type("Small", (ctypes.Structure,), {"_fields_": [("_opaque", ctypes.c_uint64 * 9)]})
    wrong = rt.Binding(binding.runtime, binding.lib, types.SimpleNamespace(**{**vars(binding.decls),
                                                                           "llama_model_params": small}),
                       {}, binding.cdll)
    assert any(p.startswith("llama_model_default_params writes 7") for p in rt.problems(wrong))


def test_an_unknown_release_is_refused_before_its_library_is_loaded(monkeypatch, tiny_folder, tmp_path) -> None:
    real = metadata.version
    monkeypatch.setattr(rt.metadata, "version", lambda name: "2099.1.99999" if name == "xllamacpp" else real(name))
    monkeypatch.setattr(rt.ctypes, "CDLL", lambda *a, **k: pytest.fail("the library was loaded"))
    monkeypatch.setattr(rt, "_LOADED", {})
    monkeypatch.setattr(rt, "installed", lambda: ["xllamacpp"])
    with pytest.raises(MissingExtraError) as error:
        rt.runtime_version()
    assert exits.for_error(error.value) == 2 and "\n" not in str(error.value)
    assert "xllamacpp 2099.1.99999 is installed" in str(error.value)
    assert all(version in str(error.value) for version in SUPPORTED)
    done = invoke("export", str(tiny_folder), "--heads", "L0.H1", "--format", "gguf", "--out", str(tmp_path / "o"))
    assert done.exit_code == 2 and "2099.1.99999" in done.output, done.output
    assert not (tmp_path / "o").exists()


def test_the_context_fields_set_reach_llama_cpp(binding, tiny_gguf) -> None:
    _, path = tiny_gguf
    llm = LlamaCpp(path, n_ctx=256, threads=1, binding=binding)  # llama.cpp pads n_ctx to a multiple of 256
    try:
        lib = binding.lib
        assert lib.llama_n_ctx(llm.ctx) == 256 and lib.llama_n_batch(llm.ctx) == 256  # defaults: 512, 2048
        assert lib.llama_n_ubatch(llm.ctx) == 256 and lib.llama_n_threads(llm.ctx) == 1  # 512, 4
        log = "".join(text for _, text in binding.log)
        assert re.search(r"flash_attn\s*=\s*disabled", log) and "K (f32)" in log and "V (f32)" in log
        assert lib.llama_n_seq_max(llm.ctx) == 1 and re.search(r"kv_unified\s*=\s*false", log)
    finally:
        llm.close()
    # Rows on a shared prefix: several sequences in one unified key/value buffer (llama.cpp's default: separate).
    llm = LlamaCpp(path, n_ctx=256, threads=1, sequences=5, binding=binding)
    try:
        log = "".join(text for _, text in binding.log)
        assert binding.lib.llama_n_seq_max(llm.ctx) == llm.sequences == 5 and re.search(r"kv_unified\s*=\s*true", log)
    finally:
        llm.close()
    assert rt.physical_cores() >= 1


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
        llm = LlamaCpp(path, n_ctx=256, kv_f32=kv_f32)
        llm.n_batch = 50  # three decode calls: positions and the cache carry across them
        try:
            got = torch.from_numpy(llm.eval(tokens, all_logits=True))
            assert llm.tokenize("the film") == list(lm.tokenizer("the film")["input_ids"])
        finally:
            llm.close()
        diffs[kv_f32] = float((got - want).abs().max())
    assert diffs[True] < 1e-5 and diffs[False] > 10 * diffs[True], diffs


def test_a_file_llama_cpp_refuses_is_a_value_error_with_its_reason(binding, tmp_path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 60)
    with pytest.raises(ValueError, match="could not load bad.gguf"):
        LlamaCpp(bad, n_ctx=32)


def test_llama_cpp_python_runs_the_file_as_xllamacpp_does(binding, tiny_gguf) -> None:
    """The runtime llama-cpp-python users have, where it is here: PyPI ships it as source only and CI does not
    build it, so this runs only where someone did (the reason says so; it is no missing extra)."""
    if "llama-cpp-python" not in rt.installed():
        pytest.skip("llama-cpp-python is absent here: PyPI ships it as source only and CI does not build it")
    theirs = rt.library("llama-cpp-python")
    assert rt.problems(theirs) == [] and theirs.runtime.startswith("llama.cpp (llama-cpp-python ")
    tokens = list(range(5, 45))
    logits = []
    for each in (theirs, binding):
        llm = LlamaCpp(tiny_gguf[1], n_ctx=256, threads=1, binding=each)
        try:
            logits.append(torch.from_numpy(llm.eval(tokens, all_logits=True)))
        finally:
            llm.close()
    assert float((logits[0] - logits[1]).abs().max()) < 1e-4
    assert rt.installed()[0] == "llama-cpp-python" and rt.runtime_version()[0] == theirs.runtime


def test_the_extra_pins_the_supported_releases_by_range() -> None:
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gguf"]
    spec = next(line for line in extra if line.startswith("xllamacpp"))
    assert "==" not in spec
    assert spec == f"xllamacpp>={min(SUPPORTED, key=rt._key)},<={max(SUPPORTED, key=rt._key)}"
