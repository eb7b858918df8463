"""Loading exports: ``headprune.load(dir)`` for sliced, dense and plain folders."""

from __future__ import annotations

from pathlib import Path

import torch

from headprune.loading.models import LoadedModel, load_model


def load(folder: str | Path, *, dtype: str | torch.dtype = "checkpoint", device: str | torch.device = "auto"
         ) -> LoadedModel:
    """Load a headprune export (sliced or dense) or any supported model folder, with its own task head.

    Sliced checkpoints are rebuilt with the recorded per-layer head counts (the same code the exported
    ``modeling_headprune.py`` runs under ``trust_remote_code``); stock from_pretrained cannot load them. The
    weights keep the dtype they were saved in unless ``dtype`` says otherwise.

    Raises:
        ModelNotFoundError, UnsupportedModelError.
    """
    return load_model(str(folder), dtype=dtype, device=device)
