"""Hub ids download only what a load reads: checked against a local server that speaks the Hub's API."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from headprune.errors import ModelNotFoundError
from headprune.loading.model_download import small_files
from headprune.loading.models import load_model
from helpers import build_tiny, save_folder

# What Llama, Mistral and GGUF/ONNX repositories keep beside the weights transformers loads.
EXTRAS = {"original/consolidated.00.pth": b"x" * 4096, "original/params.json": b"{}",
          "consolidated.safetensors": b"x" * 4096, "model-q4.gguf": b"x" * 4096, "onnx/model.onnx": b"x" * 4096,
          "pytorch_model.bin": b"x" * 4096, "README.md": b"# card", "modeling_custom.py": b"# code"}


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}



@pytest.fixture(scope="module")
def sharded(tmp_path_factory, tokenizer):  # noqa: ANN001, ANN201
    """A tiny Llama saved in several safetensors shards with their index, and its logits on a prompt."""
    folder = tmp_path_factory.mktemp("sharded")
    lm = build_tiny("llama", tokenizer, seed=4)
    save_folder(lm.model, tokenizer, folder, max_shard_size="20KB")
    assert len(list(folder.glob("model-*.safetensors"))) > 1
    return folder, lm


def _same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    left, right = a.state_dict(), b.state_dict()
    assert left.keys() == right.keys()
    for name, tensor in left.items():
        assert torch.equal(tensor, right[name]), name


def test_a_hub_id_downloads_config_tokenizer_and_the_indexed_shards_only(hub, sharded) -> None:
    folder, lm = sharded
    hub.state.add_repo("alice/tiny", {**_files(folder), **EXTRAS})
    loaded = load_model("alice/tiny", device="cpu")
    expected = {name for name in _files(folder)}  # every file save_pretrained wrote, and nothing else
    assert hub.state.downloaded("alice/tiny") == expected
    _same_weights(loaded.model, lm.model)
    requests = len(hub.state.requests)
    again = load_model("alice/tiny", device="cpu")  # the cache answers: nothing is asked of the server
    assert len(hub.state.requests) == requests and again.folder == loaded.folder


def test_bin_weights_only_where_there_are_no_safetensors(hub, tokenizer, tmp_path) -> None:
    lm = build_tiny("llama", tokenizer, seed=5)
    lm.model.config.save_pretrained(tmp_path)  # transformers 5 writes safetensors only: the .bin by hand
    torch.save(lm.model.state_dict(), tmp_path / "pytorch_model.bin")
    tokenizer.save_pretrained(tmp_path)
    assert (tmp_path / "pytorch_model.bin").is_file()
    hub.state.add_repo("alice/old", {**_files(tmp_path), "original/consolidated.00.pth": b"x" * 4096})
    loaded = load_model("alice/old", device="cpu")
    assert "pytorch_model.bin" in hub.state.downloaded("alice/old")
    assert "original/consolidated.00.pth" not in hub.state.downloaded("alice/old")
    _same_weights(loaded.model, lm.model)


def test_listing_rules() -> None:
    listing = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "chat_template.jinja", "model.safetensors", "pytorch_model.bin",
               "modeling_x.py", "original/tokenizer.model", "LICENSE", "model.safetensors.index.json"]
    plain = small_files(listing, trust_remote_code=False)
    assert plain == ["chat_template.jinja", "config.json", "generation_config.json", "model.safetensors.index.json",
                     "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
    assert "modeling_x.py" in small_files(listing, trust_remote_code=True)
    with pytest.raises(ModelNotFoundError, match="neither model.safetensors"):
        small_files(["config.json", "model.gguf", "original/model.safetensors"], trust_remote_code=False)
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        small_files(["model.safetensors"], trust_remote_code=False)


def test_a_repository_without_weights_is_one_clear_error(hub) -> None:
    hub.state.add_repo("alice/empty", {"config.json": b"{}", "model.gguf": b"x"})
    with pytest.raises(ModelNotFoundError, match="alice/empty: the repository has neither"):
        load_model("alice/empty", device="cpu")


def test_offline_and_not_cached_says_so(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match="HF_HUB_OFFLINE"):
        load_model("alice/nowhere", device="cpu")


@pytest.mark.parametrize("name", ["0/:", "alice/-x", "a/b/c", "x" * 97])
def test_a_malformed_hub_id_is_one_clear_error_before_any_request(hub, name) -> None:
    from headprune.loading.model_download import from_hub

    with pytest.raises(ModelNotFoundError, match="not a Hub repository id"):
        from_hub(name)
