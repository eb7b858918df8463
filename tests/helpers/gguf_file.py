"""A GGUF file's metadata as plain values, read with gguf-py from its floor (0.14) up."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def gguf_metadata(path: Path) -> tuple[Any, dict[str, Any]]:
    """The file's ``GGUFReader`` and its metadata, key by key (strings, numbers, lists of them)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    return reader, {key: _field_value(field, gguf.GGUFValueType) for key, field in reader.fields.items()}


def _field_value(field: Any, kinds: Any) -> Any:
    """A field's value decoded from its parts (``ReaderField.contents()`` is newer than gguf 0.14)."""

    def one(index: int, kind: Any) -> Any:
        part = field.parts[index]
        return bytes(part).decode("utf-8") if kind == kinds.STRING else part[0].item()

    if field.types[0] == kinds.ARRAY:
        return [one(index, field.types[-1]) for index in field.data]
    return one(field.data[0], field.types[0])


def gguf_knows(arch: str) -> bool:
    """Whether the installed gguf-py writes ``arch`` with the Hugging Face names of its tensors. Its floor, 0.14, lacks
    qwen3moe, gemma3, glm4 and gpt-oss, and maps no separate q/k/v of chatglm (GLM): those exports are refused in one
    line there. gguf-py 0.19 (the suite's) writes every family."""
    import gguf
    from importlib.metadata import version

    if tuple(int(p) for p in version("gguf").split(".")[:2]) >= (0, 19):
        return True  # so a family this gguf-py does not write fails the test rather than passing it as refused
    enum = next((a for a, name in gguf.MODEL_ARCH_NAMES.items() if name == arch), None)
    if enum is None:
        return False
    from headprune.exporter.gguf.families import FAMILIES

    if any(not hasattr(gguf.GGUFWriter, m) for f in FAMILIES.values() if f.arch == arch for m in f.writes_with):
        return False  # (its writer lacks the keys the family writes: refused in one line too)
    names = gguf.get_tensor_name_map(enum, 1)
    return names.get_name("model.layers.0.self_attn.q_proj.weight", try_suffixes=(".weight",)) is not None or \
        arch != "chatglm"


def llama_cpp_build() -> int:
    """The installed llama.cpp's build number (11549 for b11549), as its runtime names itself."""
    import re

    from headprune.exporter.llama_cpp.binding import runtime_version

    runtime, _ = runtime_version()
    return int(re.search(r"\bb(\d+)", runtime or "b0").group(1))
