"""Credentials in a model's files: found, left out of what headprune writes, and never published.

Older transformers releases wrote the ``token`` or ``use_auth_token`` a model was downloaded with into its
``tokenizer_config.json`` (and a config can carry one too); loaded as they are, they travel into every export (the
value even becomes an added token of ``tokenizer.json``) and from there to the Hub. A credential here is the value of
one of :data:`CREDENTIAL_KEYS` that is a non-empty string, or any string that looks like a Hugging Face token
(:data:`HF_TOKEN`). Messages name the file and the key, never the value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

CREDENTIAL_KEYS = frozenset({"token", "use_auth_token"})
HF_TOKEN = re.compile(r"hf_[A-Za-z0-9]{20,}")
SCANNED_BYTES = 64 * 1024 * 1024  # a text file larger than this is no config (weights are not text either)
TEXT_SUFFIXES = (".json", ".md", ".txt", ".py", ".yaml", ".yml", ".jinja", ".model_card")


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


def credentials_in_file(path: Path) -> list[str]:
    """The credentials' places in a text file: JSON keys (``tokenizer_config.json``: ``token``), or, in other text,
    ``a Hugging Face token (line N)``. Files too large to be text, or not text, hold none."""
    try:
        if path.stat().st_size > SCANNED_BYTES:
            return []
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    if path.suffix == ".json":
        try:
            return list(credential_keys(json.loads(text)))
        except ValueError:
            pass  # not JSON after all: read as text
    return [f"a Hugging Face token (line {text.count(chr(10), 0, match.start()) + 1})"
            for match in HF_TOKEN.finditer(text)]


def credentials_in_folder(folder: Path) -> list[tuple[str, str]]:
    """``(file relative to folder, place)`` of every credential in the folder's text files (weights are not
    read)."""
    found = []
    for path in sorted(Path(folder).rglob("*")):
        if path.is_file() and path.suffix in TEXT_SUFFIXES:
            found += [(str(path.relative_to(folder)), place) for place in credentials_in_file(path)]
    return found


__all__ = ["CREDENTIAL_KEYS", "HF_TOKEN", "credential_keys", "credentials_in_file", "credentials_in_folder",
           "is_credential", "without_credentials"]
