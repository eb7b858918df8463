"""The marker a GGUF conversion leaves (which GGUF file a folder came from) is written and read by one module."""

from __future__ import annotations

from headprune.loading.gguf_source import MARKER_NAME, source_gguf, write_marker


def test_the_marker_leads_back_to_the_gguf_file_while_it_exists(tmp_path) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    folder = tmp_path / "converted"
    folder.mkdir()
    assert source_gguf(folder, "a-model") is None  # no marker: not converted from a GGUF file
    write_marker(folder, gguf)
    assert (folder / MARKER_NAME).is_file()
    assert source_gguf(folder, "a-model") == gguf
    gguf.unlink()  # a model that is not built in cannot be found again elsewhere
    assert source_gguf(folder, "a-model") is None
