"""A GGUF export's size where it is deployed: the file's bytes and llama.cpp's key/value cache at a 4k context,
against the original written in the same type; the cache figures are what llama.cpp itself allocates (its log).

Needs llama.cpp (xllamacpp), like tests/test_gguf.py; fails without it.
"""

from __future__ import annotations

import re

import pytest
import torch
from helpers import build_tokenizer, generate_task, prefixed

from helpers.cli import invoke
from headprune.exporter import export, read_record
from headprune.exporter.gguf import writer as gguf_export
from headprune.exporter.llama_cpp import runtime as llama_cpp_runtime
from headprune.exporter.formats.gguf import Gguf
from headprune.exporter.gguf.size import CONTEXT, kv_cache_bytes
from headprune.loading.models import wrap_model

# Layer 1 loses a whole key/value group (2 of its 4 query heads), layer 2 one query head of each group: both sliced.
HEADS = "L1.H0,L1.H1,L2.H0,L2.H2"


@pytest.fixture(scope="module")
def wide():  # noqa: ANN201
    """A random Llama 128 wide (head size 32, 4 query heads over 2 key/value heads, 3 layers)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    if gguf_export.llama_cpp_version()[0] is None:
        pytest.fail("these tests run GGUF files in llama.cpp (pip install 'headprune[gguf]')")
    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=3, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=4096, vocab_size=len(tokenizer),
                         pad_token_id=0, eos_token_id=1, bos_token_id=1)
    return wrap_model(LlamaForCausalLM(config).eval(), tokenizer, name="tiny-wide")


def _logged_cache(path, *, flash_attn: bool) -> int:  # noqa: ANN001
    """The key and value cache llama.cpp allocates for ``path`` at a 4k context in f16, from its own log (MiB)."""
    llm = llama_cpp_runtime.LlamaCpp(path, n_ctx=CONTEXT, kv_f32=False, flash_attn=flash_attn, threads=1)
    try:
        log = "".join(text for _, text in llm.binding.log)
    finally:
        llm.close()
    k, v = re.findall(r"K \(f16\):\s*([\d.]+) MiB, V \(f16\):\s*([\d.]+) MiB", log)[-1]
    return round((float(k) + float(v)) * 2**20)


def test_the_cache_is_what_llama_cpp_allocates_and_the_sliced_export_is_smaller(wide, tmp_path) -> None:
    record = export(wide, HEADS, format="gguf", layout="sliced", verify_task=prefixed(generate_task()),
                    out=tmp_path / "g", verify_limit=4)
    info = Gguf.details(record)
    size = info.size
    assert info.head_count == (4, 2, 2) and info.head_count_kv == (2, 1, 2)
    path = tmp_path / "g" / "model.gguf"
    assert size.file_bytes == path.stat().st_size < size.original_file_bytes
    # 3 layers at a 4k context in f16: the original keeps 2 key/value heads of 32 everywhere, the export 1 in layer 1.
    assert size.original_kv_bytes == 2 * 3 * 2 * 32 * CONTEXT * 2
    assert size.kv_bytes == 2 * 5 * 32 * CONTEXT * 2 < size.original_kv_bytes
    assert size.kv_bytes_no_flash == (5 + 6) * 32 * CONTEXT * 2  # values padded to the widest layer
    # llama.cpp's own allocation (its log gives MiB to two decimals: 5 KiB).
    assert abs(_logged_cache(path, flash_attn=True) - size.kv_bytes) <= 6 * 2**10
    assert abs(_logged_cache(path, flash_attn=False) - size.kv_bytes_no_flash) <= 6 * 2**10
    card = (tmp_path / "g" / "README.md").read_text()
    assert f"the file is {size.file_bytes:,} bytes against the original's {size.original_file_bytes:,}" in card
    assert f"key/value cache at a 4,096-token context (f16, llama.cpp's default, flash attention on) is " \
           f"{size.kv_bytes:,} bytes against the original's {size.original_kv_bytes:,} (0.833x)" in card


def test_cli_prints_the_size_against_the_original(wide, tmp_path) -> None:
    from helpers import save_folder

    save_folder(wide.model, wide.tokenizer, tmp_path / "m")
    result = invoke("export", str(tmp_path / "m"), "--heads", HEADS, "--format", "gguf", "--out", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    size = Gguf.details(read_record(tmp_path / "o")).size
    assert (f"size in llama.cpp (f32): file {size.file_bytes:,} bytes against the original's "
            f"{size.original_file_bytes:,} ({size.file_bytes / size.original_file_bytes:.3f}x); key/value cache at a "
            f"4,096-token context (f16) {size.kv_bytes:,} bytes against the original's {size.original_kv_bytes:,} "
            "(0.833x)") in result.output
