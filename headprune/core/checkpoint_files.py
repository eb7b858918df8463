"""The weight files of a checkpoint folder: which tensor lies in which file, and those tensors read back.

A checkpoint keeps its tensors in safetensors files (``model.safetensors``, or the shards a
``model.safetensors.index.json`` lists) or, in older ones, in PyTorch pickles (``pytorch_model.bin``, or the shards a
``pytorch_model.bin.index.json`` lists); where both are present transformers loads the safetensors, and so does
this module. A safetensors header names the tensors without loading any. A pickle is read with
``torch.load(weights_only=True)``, memory-mapped (only the tensors touched are read from disk), which rebuilds
tensors and plain containers and never runs code the file names; a pickle that needs more is refused, not run.
Other ``.bin`` files in a folder (``training_args.bin`` is an arbitrary pickle) are never opened.
"""

from __future__ import annotations

import json
import pickle
import re
import warnings
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch

from headprune.errors import UnsupportedModelError

SAFETENSORS_INDEX = "model.safetensors.index.json"
PICKLE_NAME = "pytorch_model.bin"
PICKLE_INDEX = "pytorch_model.bin.index.json"
_PROTOCOL_WARNING = re.compile(r"Detected pickle protocol (\d+) in the checkpoint")


def has_weights(folder: Path) -> bool:
    """Whether ``folder`` holds safetensors or PyTorch pickle weights this module reads (nothing is opened)."""
    return any(folder.glob("*.safetensors")) or (folder / PICKLE_INDEX).is_file() or (folder / PICKLE_NAME).is_file()


def weight_map(folder: Path) -> dict[str, str]:
    """Tensor name -> the file of ``folder`` that holds it, read the way transformers chooses its weights:
    safetensors (index, else every file's header), else the pickle index, else ``pytorch_model.bin`` (whose names
    only loading it tells). Empty when the folder has none of them.

    Raises:
        UnsupportedModelError: a pickle that cannot be read safely (see :func:`load_pickle`).
    """
    from safetensors import safe_open

    safetensors = sorted(folder.glob("*.safetensors"))
    index = folder / (SAFETENSORS_INDEX if safetensors else PICKLE_INDEX)
    if index.is_file():
        return dict(json.loads(index.read_text(encoding="utf-8"))["weight_map"])
    where: dict[str, str] = {}
    for path in safetensors:
        with safe_open(path, framework="pt") as handle:
            where.update({name: path.name for name in handle.keys()})
    if not safetensors and (folder / PICKLE_NAME).is_file():
        where = {name: PICKLE_NAME for name in load_pickle(folder / PICKLE_NAME)}
    return where


def read_tensors(folder: Path, names: Sequence[str]) -> dict[str, torch.Tensor]:
    """``names`` read from the checkpoint in ``folder``, as stored (dtype and bits); a file that holds none of them
    is not opened.

    Raises:
        UnsupportedModelError: a name the checkpoint lacks, or a pickle that cannot be read safely.
    """
    from safetensors import safe_open

    where = weight_map(folder)
    missing = [name for name in names if name not in where]
    if missing:
        raise UnsupportedModelError(f"{folder}: the checkpoint has no tensor {missing[0]!r}")
    out: dict[str, torch.Tensor] = {}
    for file in sorted({where[name] for name in names}):
        wanted = [name for name in names if where[name] == file]
        if file.endswith(".safetensors"):
            with safe_open(folder / file, framework="pt") as handle:
                out.update({name: handle.get_tensor(name) for name in wanted})
        else:
            state = load_pickle(folder / file)
            out.update({name: state[name].clone() for name in wanted})  # a copy: the file's mapping is let go
    return out


def load_pickle(path: Path) -> dict[str, torch.Tensor]:
    """A PyTorch pickle's state dict, loaded with ``weights_only=True`` on the CPU (memory-mapped where the file's
    format allows: zip files, which ``torch.save`` writes since torch 1.6).

    Raises:
        UnsupportedModelError: the pickle needs more than tensors and plain containers (it would run code), it is
            damaged, or it holds something other than a flat dict of tensors.
    """
    with pickle_protocols() as protocols:
        try:
            try:
                state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as error:
                if "mmap" not in str(error):
                    raise
                state = torch.load(path, map_location="cpu", weights_only=True)  # the legacy format cannot be mapped
        except pickle.UnpicklingError as error:
            raise refused(path, error, protocols) from error
        except (RuntimeError, EOFError, OSError, zipfile.BadZipFile) as error:
            raise UnsupportedModelError(f"{path}: cannot read the weights ({_first_line(error)})") from error
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        raise UnsupportedModelError(f"{path}: not a state dict (a flat mapping of names to tensors)")
    return state


@contextmanager
def pickle_protocols() -> Iterator[list[int]]:
    """Inside the block, torch's warning that a pickle was written with a protocol other than 2 (two lines on
    stderr, which its weights-only reader may then refuse) is not printed: its protocol is collected for the one
    line of a refusal (:func:`refused`). Every other warning is shown as usual."""
    protocols: list[int] = []
    with warnings.catch_warnings():  # restores showwarning however the block ends
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
            found = _PROTOCOL_WARNING.search(str(message))
            if found:
                protocols.append(int(found.group(1)))
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        yield protocols


def refused(path: Path, error: pickle.UnpicklingError, protocols: Sequence[int] = ()) -> UnsupportedModelError:
    """The one-line error for a pickle that ``torch.load(weights_only=True)`` refuses (by headprune or by
    transformers' own loading), with the unpickler's reason instead of its advice to load it unsafely, and the
    pickle protocol where torch warned of it (collected by :func:`pickle_protocols`)."""
    found = re.search(r"WeightsUnpickler error:\s*(.*?)(?:\s+Please use|\n\n|$)", str(error), re.DOTALL)
    why = found.group(1).strip() if found and found.group(1).strip() else _first_line(error)
    if protocols:
        why += f"; it is written with pickle protocol {protocols[0]}, which that reader takes only in part"
    return UnsupportedModelError(
        f"{path}: torch.load(weights_only=True) refuses it ({why}): it is not a plain state dict of tensors (it "
        "needs code to load, or it is damaged), and headprune never runs code from a weights file; convert it to "
        "safetensors with code you trust")


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
