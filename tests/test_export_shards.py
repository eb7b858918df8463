"""Sharded safetensors exports: written with an index, loaded by from_pretrained and headprune, every shard hashed."""

from __future__ import annotations

import json

import pytest
import torch
import transformers

from headprune.surgery.ablation import ablated
from helpers.cli import invoke
from headprune.errors import ExportSettingsError, ResultFileError
from headprune.exporter import export, verify_record
from headprune.heads import parse_heads
from headprune.loading.models import load
from helpers import build_tiny, choice_task, save_folder

IDS = torch.tensor([[5, 9, 14, 3, 27, 8, 11]])
INDEX = "model.safetensors.index.json"


@pytest.mark.parametrize("layout", ["sliced", "dense"])
def test_a_small_shard_size_writes_shards_that_load_back(tokenizer, tmp_path, layout) -> None:
    lm = build_tiny("llama", tokenizer, seed=6)
    out = tmp_path / layout
    record = export(lm, "L0.H1,L1.H2", layout=layout, verify_task=choice_task(), max_shard_size="20KB", out=out)
    shards = sorted(p.name for p in out.glob("model-*.safetensors"))
    index = json.loads((out / INDEX).read_text())
    assert len(shards) > 2 and not (out / "model.safetensors").exists()
    assert sorted(set(index["weight_map"].values())) == shards
    assert set(shards) | {INDEX} <= set(record.files)  # every shard and the index are hashed in the record
    assert record.bytes.after == sum((out / name).stat().st_size for name in shards)
    with ablated(lm, parse_heads("L0.H1,L1.H2")), torch.no_grad():
        want = lm.model(input_ids=IDS).logits
    stock = transformers.AutoModelForCausalLM.from_pretrained(out, trust_remote_code=layout == "sliced")
    with torch.no_grad():
        torch.testing.assert_close(stock(input_ids=IDS).logits, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(load(out, device="cpu").model(input_ids=IDS).logits, want, rtol=1e-5, atol=1e-5)
    verify_record(out)
    shard = out / shards[1]
    data = bytearray(shard.read_bytes())
    data[-1] ^= 1
    shard.write_bytes(bytes(data))
    with pytest.raises(ResultFileError, match=f"{shards[1]} was changed"):
        verify_record(out)


@pytest.mark.parametrize(("size", "fmt", "fragment"), [("lots", "safetensors", "must be a size"),
                                                       ("0", "safetensors", "must be a size"),
                                                       ("5GB", "onnx", "applies to safetensors exports")])
def test_nonsense_shard_sizes_are_refused_before_anything_runs(tokenizer, tmp_path, size, fmt, fragment) -> None:
    with pytest.raises(ExportSettingsError, match=fragment):
        export(build_tiny("llama", tokenizer), "L0.H1", format=fmt, verify_task=choice_task(), max_shard_size=size,
               out=tmp_path / "never")
    assert list(tmp_path.iterdir()) == []


def test_cli_max_shard_size(tokenizer, tmp_path) -> None:
    lm = build_tiny("llama", tokenizer, seed=6)
    save_folder(lm.model, tokenizer, tmp_path / "model")
    ok = invoke("export", str(tmp_path / "model"), "--heads", "L0.H1", "--max-shard-size", "20KB",
                "--out", str(tmp_path / "pruned"))
    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "pruned" / INDEX).is_file()
    bad = invoke("export", str(tmp_path / "model"), "--heads", "L0.H1", "--max-shard-size", "big",
                 "--out", str(tmp_path / "never"))
    assert bad.exit_code == 2 and "must be a size" in bad.output and not (tmp_path / "never").exists()
