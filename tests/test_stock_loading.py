"""Whether stock transformers loads per-layer head counts without remote code: probed at export (a two-layer model of
the family with ``per_layer_config``), recorded, and said on a sliced safetensors export's card and by the CLI."""

from __future__ import annotations

import pytest
from helpers import build_tiny, save_folder

from helpers.cli import invoke
from headprune.exporter import export, read_record
from headprune.exporter.formats.safetensors import Safetensors
from headprune.exporter.transformers_probe import probe


def _stock_builds_per_layer_heads(model_type: str) -> bool:
    """Independently of the probe: can this transformers build a model of ``model_type`` whose layer 1 has half the
    query heads of layer 0 (from ``per_layer_config``)?"""
    from transformers import AutoConfig, AutoModel

    try:
        config = AutoConfig.for_model(model_type, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=16, num_hidden_layers=2, intermediate_size=32, vocab_size=32,
                                      per_layer_config={1: {"num_attention_heads": 2, "num_key_value_heads": 1}})
        model = AutoModel.from_config(config)
    except Exception:  # noqa: BLE001
        return False
    return [layer.self_attn.o_proj.in_features for layer in model.layers] == [64, 32]


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_the_probe_says_what_the_installed_transformers_does(tokenizer, family) -> None:
    lm = build_tiny(family, tokenizer)
    found = probe(lm.model.config.model_type, lm.adapter)
    assert found.per_layer_heads == _stock_builds_per_layer_heads(lm.model.config.model_type)
    assert found.model_type == family and (found.reason == "") == found.per_layer_heads
    import transformers

    assert found.transformers == transformers.__version__


def test_a_sliced_export_records_it_and_the_card_and_cli_say_it(tokenizer, tmp_path) -> None:
    lm = build_tiny("llama", tokenizer)
    save_folder(lm.model, tokenizer, tmp_path / "m")
    result = invoke("export", str(tmp_path / "m"), "--heads", "L1.H0,L1.H1", "--out", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    stock = Safetensors.details(read_record(tmp_path / "o"))
    assert stock == probe("llama", lm.adapter)
    card = (tmp_path / "o" / "README.md").read_text()
    if not stock.per_layer_heads:
        assert f"which transformers {stock.transformers} cannot load for `llama` without remote code" in card
        assert "--layout dense" in card and stock.reason in card
        assert f"note: transformers {stock.transformers} cannot load per-layer head counts for llama" in result.output
    dense = export(lm, "L1.H0,L1.H1", layout="dense", out=tmp_path / "d")
    assert Safetensors.details(dense) is None  # a dense export loads with the stock class: nothing to say
