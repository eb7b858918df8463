"""Reading a checkpoint folder's weights: the files transformers would load, pickles only through
``torch.load(weights_only=True)``, and nothing else in the folder opened."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from headprune.core.checkpoint_files import has_weights, read_tensors, weight_map
from headprune.errors import UnsupportedModelError


class _Marks:
    """Unpickling it would create a file: proof that a pickle was run."""

    def __init__(self, path) -> None:  # noqa: ANN001
        self.path = str(path)

    def __reduce__(self):  # noqa: ANN204
        return (exec, (f"open({self.path!r}, 'w').close()",))


def test_safetensors_come_first_and_other_pickles_are_never_opened(tmp_path) -> None:
    save_file({"a": torch.ones(2)}, tmp_path / "model.safetensors")
    torch.save({"b": torch.zeros(3)}, tmp_path / "pytorch_model.bin")  # an older copy beside them
    torch.save({"args": _Marks(tmp_path / "ran")}, tmp_path / "training_args.bin")
    assert weight_map(tmp_path) == {"a": "model.safetensors"}
    assert torch.equal(read_tensors(tmp_path, ["a"])["a"], torch.ones(2))
    (tmp_path / "model.safetensors").unlink()
    assert has_weights(tmp_path) and weight_map(tmp_path) == {"b": "pytorch_model.bin"}
    assert not (tmp_path / "ran").exists()


def test_a_pickle_reads_bit_for_bit_in_both_formats(tmp_path) -> None:
    tensor = torch.tensor([1.5, float("nan"), -0.0], dtype=torch.bfloat16)
    for zipped in (True, False):  # torch >= 1.6 writes zip files (memory-mapped); the legacy format is read whole
        torch.save({"t": tensor}, tmp_path / "pytorch_model.bin", _use_new_zipfile_serialization=zipped)
        got = read_tensors(tmp_path, ["t"])["t"]
        assert got.dtype == torch.bfloat16 and got.view(torch.int16).tolist() == tensor.view(torch.int16).tolist()


def test_what_is_not_a_plain_state_dict_is_refused(tmp_path) -> None:
    torch.save({"t": torch.ones(1), "nested": {"u": torch.ones(1)}}, tmp_path / "pytorch_model.bin")
    with pytest.raises(UnsupportedModelError, match="not a state dict"):
        weight_map(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"not a pickle")
    with pytest.raises(UnsupportedModelError, match="refuses it"):
        weight_map(tmp_path)
    torch.save({"t": torch.ones(1), "x": _Marks(tmp_path / "ran")}, tmp_path / "pytorch_model.bin")
    with pytest.raises(UnsupportedModelError, match="Unsupported global"):
        read_tensors(tmp_path, ["t"])
    assert not (tmp_path / "ran").exists()
    (tmp_path / "empty").mkdir()
    assert not has_weights(tmp_path / "empty") and weight_map(tmp_path / "empty") == {}
