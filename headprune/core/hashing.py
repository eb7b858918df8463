"""Content hashes: of one file, of a model folder's weights (how a run names the model it used, and how an
export record lets anyone check the files it describes), and of a record's JSON (how a find result shows it was not
edited)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from pathlib import Path

# The weight files of a Hugging Face checkpoint: what a model's weight hash covers (a run names its model by it).
HASHED_WEIGHT_SUFFIXES = (".safetensors", ".bin")


def sha256_file(path: Path, digest: hashlib._Hash | None = None) -> str:
    """Feed a file to ``digest`` (a new sha256 when ``None``) in 4 MiB blocks; return the hex digest."""
    digest = digest if digest is not None else hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def hash_weights(folder: Path) -> str:
    """``sha256:...`` over a model folder's weight files (name and bytes, in name order)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(folder).iterdir() if p.suffix in HASHED_WEIGHT_SUFFIXES):
        digest.update(path.name.encode())
        sha256_file(path, digest)
    return "sha256:" + digest.hexdigest()


def json_digest(data: dict, *, leave_out: Collection[str] = ()) -> str:
    """``sha256:...`` of a JSON object without its keys ``leave_out``, written with sorted keys and no spaces (numbers
    as JSON writes them, so an object read back from a file gives the digest it was written with)."""
    body = {key: value for key, value in data.items() if key not in leave_out}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
