"""A credential inside a binary file: an export refuses to write one (a GGUF file carries its source's chat template
and vocabulary inside), and push refuses to upload one, binary or not, through the one scan of
``headprune.core.credentials``; weights do not trip it."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from headprune.core import credentials
from headprune.exporter import read_record
from headprune.exporter.export_record import file_hashes
from headprune.tasks import write_jsonl_task
from helpers import build_tiny, random_choice_task, save_folder
from helpers.cli import invoke
from helpers.hub_server import VALID_TOKEN, HubServer

SECRET = "hf_" + "Q" * 34
HARMLESS = "xx_" + "Q" * 34  # as long as the secret: a byte patch turns one into the other
TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}{# TOKEN #}"


@pytest.fixture(scope="module")
def source(tmp_path_factory, tokenizer):  # noqa: ANN001, ANN201
    """A tiny Llama folder with a chat template that holds nothing, a task, and clean exports of it (GGUF, ONNX)."""
    root = tmp_path_factory.mktemp("inside")
    save_folder(build_tiny("llama", tokenizer, seed=3).model, tokenizer, root / "model")
    (root / "model" / "chat_template.jinja").write_text(TEMPLATE.replace("TOKEN", HARMLESS))
    write_jsonl_task(random_choice_task(16, seed=1), root / "task.jsonl")
    for fmt in ("gguf", "onnx"):
        done = invoke("export", str(root / "model"), "--heads", "L0.H1", "--format", fmt, "--verify-task",
                      str(root / "task.jsonl"), "--out", str(root / fmt))
        assert done.exit_code == 0, done.output
    return root


def _leaky_copy(source: Path, folder: Path) -> Path:
    shutil.copytree(source / "model", folder)
    (folder / "chat_template.jinja").write_text(TEMPLATE.replace("TOKEN", SECRET))
    return folder


def _no_staging(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if ".tmp-" in p.name]


@pytest.mark.parametrize(("fmt", "where"), [
    ("gguf", "model.gguf would carry a credential (a Hugging Face token in its metadata tokenizer.chat_template)"),
    ("safetensors", "chat_template.jinja would carry a credential (a Hugging Face token (line 1))"),
    ("onnx", "chat_template.jinja would carry a credential (a Hugging Face token (line 1))")])
def test_a_token_in_the_chat_template_stops_every_format(source, tmp_path, fmt, where) -> None:
    leaky = _leaky_copy(source, tmp_path / "leaky")
    done = invoke("export", str(leaky), "--heads", "L0.H1", "--format", fmt, "--verify-task",
                  str(source / "task.jsonl"), "--out", str(tmp_path / "out"))
    assert done.exit_code == 2 and done.stderr.splitlines()[-1].startswith("headprune: error: "), done.output
    assert where in done.stderr.splitlines()[-1] and SECRET not in done.output
    assert not (tmp_path / "out").exists() and _no_staging(tmp_path) == []


def test_a_token_in_the_vocabulary_stops_a_gguf_export(source, tmp_path) -> None:
    """An added token the source's tokenizer holds goes into the GGUF file's vocabulary: refused, named by key."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path / "vocab"
    shutil.copytree(source / "model", folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.add_tokens([SECRET])
    model = AutoModelForCausalLM.from_pretrained(folder)
    model.resize_token_embeddings(len(tokenizer))  # the added token has an embedding, as a real one would
    save_folder(model, tokenizer, folder)
    done = invoke("export", str(folder), "--heads", "L0.H1", "--format", "gguf", "--out", str(tmp_path / "out"))
    assert done.exit_code == 2, done.output
    assert "model.gguf would carry a credential (a Hugging Face token in its metadata tokenizer.ggml.tokens)" in \
        done.stderr and SECRET not in done.output and not (tmp_path / "out").exists()


def _planted(export: Path, folder: Path, name: str) -> Path:
    """A copy of a clean export whose file ``name`` carries the secret where it carried the harmless text (as an
    export made before headprune read binary files would), its record's file hashes brought up to date."""
    shutil.copytree(export, folder)
    data = (folder / name).read_bytes()
    assert data.count(HARMLESS.encode()) == 1
    (folder / name).write_bytes(data.replace(HARMLESS.encode(), SECRET.encode()))
    replace(read_record(folder), files=file_hashes(folder)).save(folder)
    return folder


def _onnx_with_metadata(export: Path, folder: Path) -> Path:
    import onnx

    shutil.copytree(export, folder)
    model = onnx.load(folder / "model.onnx")
    onnx.helper.set_model_props(model, {"note": HARMLESS})
    onnx.save(model, folder / "model.onnx")
    return _planted(folder, folder.with_name(folder.name + "-planted"), "model.onnx")


@pytest.mark.parametrize(("fmt", "where"), [
    ("gguf", "model.gguf holds a credential (a Hugging Face token in its metadata tokenizer.chat_template)"),
    ("onnx", "model.onnx holds a credential (a Hugging Face token (byte "),
    ("onnx-chat", "chat_template.jinja holds a credential (a Hugging Face token (line 1))")])
def test_push_scans_every_file_it_would_upload(source, tmp_path, monkeypatch, fmt, where) -> None:
    if fmt == "gguf":
        folder = _planted(source / "gguf", tmp_path / "old", "model.gguf")
    elif fmt == "onnx":
        folder = _onnx_with_metadata(source / "onnx", tmp_path / "meta")
    else:
        folder = _planted(source / "onnx", tmp_path / "old", "chat_template.jinja")
    with HubServer() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        for extra in (["--dry-run"], ["--token", VALID_TOKEN]):
            pushed = invoke("push", str(folder), "--repo-id", "alice/pruned", *extra)
            assert pushed.exit_code == 2 and pushed.output.count("\n") == 1, pushed.output
            assert where in pushed.output and SECRET not in pushed.output
        assert hub.state.commits == []
    clean = invoke("push", str(source / fmt.removesuffix("-chat")), "--repo-id", "alice/pruned", "--dry-run")
    assert clean.exit_code == 0, clean.output  # the same export as headprune wrote it goes up


def test_a_token_across_two_blocks_is_found_once(tmp_path, monkeypatch) -> None:
    """The file is read in blocks; a token cut by a block's end is found in the next, once, at its offset."""
    monkeypatch.setattr(credentials, "BLOCK_BYTES", 64)  # blocks end at bytes 86, 150, 214, ... (22 carried)
    body = bytearray(1000)
    offsets = [70, 140, 400, 960]  # across the first and second blocks' ends, inside one, at the file's end
    for offset in offsets:
        body[offset: offset + len(SECRET)] = SECRET.encode()
    (tmp_path / "w.bin").write_bytes(bytes(body))
    assert list(credentials.token_offsets(tmp_path / "w.bin")) == offsets
    assert credentials.credentials_in_file(tmp_path / "w.bin") == [
        f"a Hugging Face token (byte {offset})" for offset in offsets]
    body[140: 143] = b"hf-"  # no longer the pattern
    (tmp_path / "w.bin").write_bytes(bytes(body))
    assert list(credentials.token_offsets(tmp_path / "w.bin")) == [70, 400, 960]


def test_weights_hold_no_token_however_large(source) -> None:
    """What the exports wrote (float32 GGUF and ONNX weights, tokenizers) reads clean: no false alarm."""
    for fmt in ("gguf", "onnx"):
        assert credentials.credentials_in_folder(source / fmt) == []
    assert json.loads((source / "gguf" / "headprune_export.json").read_text())["format"] == "gguf"
