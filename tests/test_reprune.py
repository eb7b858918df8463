"""A sliced export pruned again: its heads named as its record names them (the original's numbering), the heads it
already lacks removed too, and the result the same model, number for number, as removing all of them at once.

Before, ``export EXPORT --heads ...`` failed with a size mismatch naming a staging folder: the export's layers hold
fewer heads than its config's numbering. Checked on each family's tiny model (separate, GPT-2 and NeoX projections;
grouped key/value heads, a group emptied), in both layouts of the second export.
"""

from __future__ import annotations

import pytest
import torch

from headprune.exporter import read_record
from headprune.loading.models import load
from helpers import build_tiny, save_folder
from helpers.cli import invoke

FIRST, SECOND = "L0.H1", "L0.H0,L1.H2"  # layer 0 loses its first key/value group in the end (Llama: 2 KV heads)


@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt_neox", "bert"])
@pytest.mark.parametrize("layout", ["sliced", "dense"])
def test_a_sliced_export_pruned_again_is_the_model_pruned_once(tmp_path, tokenizer, family, layout) -> None:
    model = save_folder(build_tiny(family, tokenizer, seed=3).model, tokenizer, tmp_path / "model")
    assert invoke("export", str(model), "--heads", FIRST, "--out", str(tmp_path / "first")).exit_code == 0
    again = invoke("export", str(tmp_path / "first"), "--heads", SECOND, "--layout", layout, "--out",
                   str(tmp_path / "again"))
    assert again.exit_code == 0, again.output
    assert f"without {FIRST}; those go too" in again.stderr
    once = invoke("export", str(model), "--heads", f"{FIRST},{SECOND}", "--layout", layout, "--out",
                  str(tmp_path / "once"))
    assert once.exit_code == 0, once.output
    twice, direct = read_record(tmp_path / "again"), read_record(tmp_path / "once")
    assert twice.removed_heads == direct.removed_heads == ("L0.H0", "L0.H1", "L1.H2")
    assert twice.parameters == direct.parameters and twice.layers == direct.layers
    a, b = load(tmp_path / "again", device="cpu"), load(tmp_path / "once", device="cpu")
    ids = torch.tensor([tokenizer("the film is a delight from start to finish").input_ids])
    with torch.no_grad():
        left, right = a.model(input_ids=ids), b.model(input_ids=ids)
    key = "logits" if "logits" in left else "last_hidden_state"
    torch.testing.assert_close(left[key], right[key], rtol=0, atol=1e-5)
    assert sum(p.numel() for p in a.model.parameters()) == sum(p.numel() for p in b.model.parameters())


@pytest.mark.parametrize(("model_type", "path"), [("gpt_oss", "self_attn.sinks"),
                                                 ("cohere", "self_attn.q_norm.weight")])
def test_per_head_parameters_are_put_back_when_a_sliced_export_is_pruned_again(tmp_path, tokenizer, model_type,
                                                                                path) -> None:
    """GPT-OSS's attention sinks and Command R+'s per-head norm weights, a row per head: a sliced export pruned again
    (which failed on their shapes) is the model pruned once, those rows the kept heads' own."""
    from headprune.loading.adapters.base import get_path
    from headprune.testing import family_model

    model = family_model(model_type, len(tokenizer), seed=5)
    with torch.no_grad():  # distinct rows, so a wrong row is seen
        for layer in model.model.layers:
            get_path(layer, path).copy_(torch.randn_like(get_path(layer, path)))
    folder = save_folder(model, tokenizer, tmp_path / "model")
    assert invoke("export", str(folder), "--heads", FIRST, "--out", str(tmp_path / "first")).exit_code == 0
    again = invoke("export", str(tmp_path / "first"), "--heads", SECOND, "--out", str(tmp_path / "again"))
    assert again.exit_code == 0, again.output
    once = invoke("export", str(folder), "--heads", f"{FIRST},{SECOND}", "--out", str(tmp_path / "once"))
    assert once.exit_code == 0, once.output
    a, b = load(tmp_path / "again", device="cpu").model, load(tmp_path / "once", device="cpu").model
    ids = torch.tensor([tokenizer("the film is a delight from start to finish").input_ids])
    with torch.no_grad():
        torch.testing.assert_close(a(input_ids=ids).logits, b(input_ids=ids).logits, rtol=0, atol=1e-5)
    assert all(torch.equal(get_path(x, path), get_path(y, path)) for x, y in zip(a.model.layers, b.model.layers))


@pytest.mark.parametrize("heads", [FIRST, f"{FIRST},L1.H2"])
def test_a_head_the_export_already_lacks_is_refused(tmp_path, tokenizer, heads) -> None:
    """Naming a head the export removed most likely counts the sliced model's own heads (another head now sits at
    that place): refused in one line rather than written as a copy, or with other heads removed than meant."""
    from helpers.cli import assert_refused

    model = save_folder(build_tiny("llama", tokenizer, seed=3).model, tokenizer, tmp_path / "model")
    assert invoke("export", str(model), "--heads", FIRST, "--out", str(tmp_path / "first")).exit_code == 0
    again = invoke("export", str(tmp_path / "first"), "--heads", heads, "--out", str(tmp_path / "again"))
    assert_refused(again, f"is a sliced export without {FIRST}: {FIRST} is gone already; heads are named as in the "
                          "original model (as its record names them): name only heads it still has")
    assert not (tmp_path / "again").exists()
