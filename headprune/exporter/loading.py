"""Loading exports: ``headprune.load(dir)`` for sliced, dense and plain folders."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from headprune.errors import ModelNotFoundError
from headprune.models import LoadedModel, load_config, load_model


def read_slicing(folder: Path) -> dict | None:
    """The ``headprune`` record of a sliced checkpoint's config.json (``None`` for a stock layout)."""
    try:
        return json.loads((Path(folder) / "config.json").read_text(encoding="utf-8")).get("headprune")
    except (OSError, json.JSONDecodeError):
        return None


def load(folder: str | Path, *, dtype: torch.dtype = torch.float32) -> LoadedModel:
    """Load a headprune export (sliced or dense) or any supported model folder.

    Sliced checkpoints are rebuilt with the recorded per-layer head counts (the same code the exported
    ``modeling_headprune.py`` runs under ``trust_remote_code``); stock from_pretrained cannot load them.

    Raises:
        ModelNotFoundError, UnsupportedModelError.
    """
    folder = Path(folder)
    record = read_slicing(folder)
    if record is None:
        return load_model(str(folder), dtype=dtype)
    from transformers import AutoTokenizer

    from headprune.adapters import adapter_for
    from headprune.exporter.remote_modeling import headpruned_class

    config = load_config(folder)
    adapter = adapter_for(config)
    if not any(folder.glob("*.safetensors")):
        raise ModelNotFoundError(f"{folder}: a sliced export without safetensors weights (an ONNX export?)")
    model = headpruned_class(record["base_class"]).from_pretrained(folder, dtype=dtype)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return LoadedModel(str(folder), folder, model, tokenizer, adapter, adapter.grid(config))
