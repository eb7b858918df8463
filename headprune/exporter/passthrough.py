"""Checkpoint tensors the loading class does not use, written through a safetensors export unchanged.

Those a class drops by design (its ``_keys_to_ignore_on_load_unexpected``: Qwen3.5's and Qwen3-Next's ``mtp.*``
multi-token-prediction layer, DeepSeek-V3's and GLM-4.5's extra layer, Gemma 4's key/value-shared layers' k/v:
:func:`headprune.loading.model_checks.dropped_tensors`) are no heads of the stack headprune prunes, and would be lost
without a word: they are copied as below (the config is left as it is).

A checkpoint whose class transformers lacks, and which ships no code for it (no ``auto_map``), is loaded with
the family's class whose tensors match best (:func:`headprune.loading.model_class.best_match`): a BERT masked-LM
published with extra classifier heads loads as ``BertForMaskedLM``, which leaves those heads out. An export
must not lose them: they are copied from the checkpoint's files (safetensors, or a ``pytorch_model.bin`` read
without running code: :mod:`headprune.core.checkpoint_files`), tensor by tensor and bit for bit, into
``model-passthrough.safetensors``, which the weight index lists beside the pruned model's own files (a
single ``model.safetensors`` becomes the index's first file, since transformers reads an index only where no
``model.safetensors`` exists). ``config.json`` names the checkpoint's own class again, so the code that
published it loads the export as it loaded the original.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import torch

from headprune.core.checkpoint_files import read_tensors, weight_map

INDEX_NAME = "model.safetensors.index.json"
PASSTHROUGH_NAME = "model-passthrough.safetensors"
SINGLE_RENAMED = "model-00001-of-00001.safetensors"


def write_through(source: Path, out: Path, names: Sequence[str], declared_class: str | None) -> None:
    """Copy ``names`` from the checkpoint in ``source`` into the export in ``out``, list them in its weight
    index, and name ``declared_class`` (where a class stood in for it) in its ``config.json`` again."""
    from safetensors.torch import save_file

    tensors = read_tensors(source, names)
    save_file(tensors, out / PASSTHROUGH_NAME, metadata={"format": "pt"})
    weights = weight_map(out)
    if (out / "model.safetensors").is_file():
        (out / "model.safetensors").rename(out / SINGLE_RENAMED)
        weights = {name: SINGLE_RENAMED if file == "model.safetensors" else file for name, file in weights.items()}
    weights.update({name: PASSTHROUGH_NAME for name in tensors})
    total = sum((out / file).stat().st_size for file in set(weights.values()))
    (out / INDEX_NAME).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": dict(
        sorted(weights.items()))}, indent=2) + "\n", encoding="utf-8")
    if declared_class is None:
        return
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    config["architectures"] = [declared_class]
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def unchanged(source: Path, out: Path, names: Sequence[str]) -> tuple[list[str], list[str]]:
    """(names equal bit for bit in the export and the checkpoint, names that differ or are missing)."""
    want, where = read_tensors(source, names), weight_map(out)
    have = read_tensors(out, [name for name in names if name in where])
    same = [name for name in have if _bits(have[name]) == _bits(want[name])]
    return same, sorted(set(names) - set(same))


def _bits(tensor: torch.Tensor) -> tuple[torch.dtype, tuple[int, ...], bytes]:
    """What "bit for bit" compares: dtype, shape and the raw bytes (a NaN equals itself here)."""
    raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
    return tensor.dtype, tuple(tensor.shape), raw.numpy().tobytes()
