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
