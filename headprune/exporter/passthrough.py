"""Checkpoint tensors the loading class does not use, written through a safetensors export unchanged.

A checkpoint whose class transformers lacks, and which ships no code for it (no ``auto_map``), is loaded with
the family's class whose tensors match best (:func:`headprune.model_class.best_match`): a BERT masked-LM
published with extra classifier heads loads as ``BertForMaskedLM``, which leaves those heads out. An export
must not lose them: they are copied from the checkpoint's files, tensor by tensor and bit for bit, into
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

INDEX_NAME = "model.safetensors.index.json"
PASSTHROUGH_NAME = "model-passthrough.safetensors"
SINGLE_RENAMED = "model-00001-of-00001.safetensors"


def _where(folder: Path) -> dict[str, str]:
    """Tensor name -> file name of a safetensors checkpoint folder."""
    from safetensors import safe_open

    index = folder / INDEX_NAME
    if index.is_file():
        return json.loads(index.read_text(encoding="utf-8"))["weight_map"]
    where = {}
    for path in sorted(folder.glob("*.safetensors")):
        with safe_open(path, framework="pt") as handle:
            where.update({name: path.name for name in handle.keys()})
    return where


def read_tensors(folder: Path, names: Sequence[str]) -> dict[str, torch.Tensor]:
    """``names`` read from a safetensors checkpoint folder (only those tensors are loaded)."""
    from safetensors import safe_open

    where, out = _where(folder), {}
    for file in sorted({where[name] for name in names}):
        with safe_open(folder / file, framework="pt") as handle:
            out.update({name: handle.get_tensor(name) for name in names if where[name] == file})
    return out


def write_through(source: Path, out: Path, names: Sequence[str], declared_class: str) -> None:
    """Copy ``names`` from the checkpoint in ``source`` into the export in ``out``, list them in its weight
    index, and name ``declared_class`` in its ``config.json`` again."""
    from safetensors.torch import save_file

    tensors = read_tensors(source, names)
    save_file(tensors, out / PASSTHROUGH_NAME, metadata={"format": "pt"})
    weight_map = _where(out)
    if (out / "model.safetensors").is_file():
        (out / "model.safetensors").rename(out / SINGLE_RENAMED)
        weight_map = {name: SINGLE_RENAMED if file == "model.safetensors" else file for name, file in weight_map.items()}
    weight_map.update({name: PASSTHROUGH_NAME for name in tensors})
    total = sum((out / file).stat().st_size for file in set(weight_map.values()))
    (out / INDEX_NAME).write_text(json.dumps({"metadata": {"total_size": total}, "weight_map": dict(
        sorted(weight_map.items()))}, indent=2) + "\n", encoding="utf-8")
    config = json.loads((out / "config.json").read_text(encoding="utf-8"))
    config["architectures"] = [declared_class]
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def unchanged(source: Path, out: Path, names: Sequence[str]) -> tuple[list[str], list[str]]:
    """(names equal bit for bit in the export and the checkpoint, names that differ or are missing)."""
    want, where = read_tensors(source, names), _where(out)
    have = read_tensors(out, [name for name in names if name in where])
    same = [name for name in have if have[name].dtype == want[name].dtype and torch.equal(have[name], want[name])]
    return same, sorted(set(names) - set(same))
