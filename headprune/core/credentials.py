"""Credentials in a model's files: found, left out of what headprune writes, and never published.

Older transformers releases wrote the ``token`` or ``use_auth_token`` a model was downloaded with into its
``tokenizer_config.json`` (and a config can carry one too); loaded as they are, they travel into every export (the
value even becomes an added token of ``tokenizer.json``) and from there to the Hub. A credential here is the value of
one of :data:`CREDENTIAL_KEYS` that is a non-empty string, or any string that looks like a Hugging Face token
(:data:`HF_TOKEN`). Messages name the file and the key, never the value.

Text travels inside binary files too (a GGUF file's chat template and vocabulary, an ONNX graph's metadata), so a
file that is not a small UTF-8 text file is read as bytes, block by block (memory stays bounded whatever its size),
for the same Hugging Face token pattern. Weights do not match it by chance: the pattern needs ``hf_`` and twenty
letters or digits in a row, which a float32 weight between 2**-7 and 2 in magnitude breaks every fourth byte (its
top byte is 0x3C to 0x3F or 0xBC to 0xBF) and random bytes hold about once in 10**19 positions (none in the default
model's weights, float32 or quantized).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path

CREDENTIAL_KEYS = frozenset({"token", "use_auth_token"})
HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{20,}")
HF_TOKEN_BYTES = re.compile(HF_TOKEN.pattern.encode("ascii"))  # the same pattern, on a file's bytes
SCANNED_BYTES = 64 * 1024 * 1024  # a text file larger than this is read as bytes (weights are not text either)
TEXT_SUFFIXES = (".json", ".md", ".txt", ".py", ".yaml", ".yml", ".jinja", ".model_card")
BLOCK_BYTES = 16 * 1024 * 1024  # a binary file is read in blocks of this size
_CARRIED = 22  # bytes carried from one block to the next: a token's shortest form ("hf_" and 20) less one

# Names the place of an offset in a binary file (a GGUF file's metadata key), or None where it cannot.
PlaceNamer = Callable[[Path, int], "str | None"]


def is_credential(key: object, value: object) -> bool:
    """Whether ``value`` (under ``key``) is a credential."""
    if not isinstance(value, str):
        return False
    return (key in CREDENTIAL_KEYS and bool(value.strip())) or HF_TOKEN.search(value) is not None


def credential_keys(data: object, where: str = "") -> Iterator[str]:
    """The places of the credentials in parsed JSON ``data``, as ``key``, ``outer.key`` or ``list[2].key``."""
    if isinstance(data, dict):
        for key, value in data.items():
            place = f"{where}.{key}" if where else str(key)
            if is_credential(key, value):
                yield place
            else:
                yield from credential_keys(value, place)
    elif isinstance(data, list):
        for index, value in enumerate(data):
            if is_credential(None, value):
                yield f"{where}[{index}]"
            else:
                yield from credential_keys(value, f"{where}[{index}]")


def without_credentials(data: object) -> object:
    """``data`` with every credential left out (a key and its value; a list item)."""
    if isinstance(data, dict):
        return {key: without_credentials(value) for key, value in data.items() if not is_credential(key, value)}
    if isinstance(data, list):
        return [without_credentials(value) for value in data if not is_credential(None, value)]
    return data


def token_offsets(path: Path) -> Iterator[int]:
    """The byte offsets of Hugging Face tokens (:data:`HF_TOKEN`) in a file of any kind, read in blocks of
    :data:`BLOCK_BYTES` (each block scanned with the end of the one before, so a token across two is found once)."""
    buffer = bytearray(BLOCK_BYTES + _CARRIED)
    view = memoryview(buffer)
    carried = start = 0  # bytes carried over; the file offset of buffer[0]
    with Path(path).open("rb") as handle:
        while (read := handle.readinto(view[carried:])):
            end = carried + read
            for match in HF_TOKEN_BYTES.finditer(buffer, 0, end):
                yield start + match.start()
            kept = min(_CARRIED, end)
            buffer[:kept] = buffer[end - kept: end]
            start, carried = start + end - kept, kept


def _text(path: Path) -> str | None:
    """The file as text when it is a small UTF-8 text file (read as such), else None (read as bytes)."""
    if path.suffix not in TEXT_SUFFIXES or path.stat().st_size > SCANNED_BYTES:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None


def credentials_in_file(path: Path, place: PlaceNamer | None = None) -> list[str]:
    """The credentials' places in a file: JSON keys (``tokenizer_config.json``: ``token``); in other text,
    ``a Hugging Face token (line N)``; in any other file (binary, or text too large to read whole),
    ``a Hugging Face token in KEY`` where ``place`` names the offset's place, else ``(byte N)``. A file that cannot
    be read holds none."""
    path = Path(path)
    try:
        text = _text(path)
        if text is None:
            return [_binary_place(path, offset, place) for offset in token_offsets(path)]
    except OSError:
        return []
    if path.suffix == ".json":
        try:
            return list(credential_keys(json.loads(text)))
        except ValueError:
            pass  # not JSON after all: read as text
    return [f"a Hugging Face token (line {text.count(chr(10), 0, match.start()) + 1})"
            for match in HF_TOKEN.finditer(text)]


def _binary_place(path: Path, offset: int, place: PlaceNamer | None) -> str:
    named = place(path, offset) if place is not None else None
    return f"a Hugging Face token in {named}" if named else f"a Hugging Face token (byte {offset:,})"


def credentials_in_folder(folder: Path, place: PlaceNamer | None = None,
                          names: tuple[str, ...] | None = None) -> list[tuple[str, str]]:
    """``(file relative to folder, place)`` of every credential in the folder's files, weights and other binary
    files included (:func:`credentials_in_file`; ``place`` names places inside binary files); ``names``: only
    those files (relative paths)."""
    folder = Path(folder)
    paths = [folder / name for name in names] if names is not None else sorted(folder.rglob("*"))
    found = []
    for path in paths:
        if path.is_file():
            found += [(str(path.relative_to(folder)), spot) for spot in credentials_in_file(path, place)]
    return found


__all__ = ["CREDENTIAL_KEYS", "HF_TOKEN", "PlaceNamer", "credential_keys", "credentials_in_file",
           "credentials_in_folder", "is_credential", "token_offsets", "without_credentials"]
