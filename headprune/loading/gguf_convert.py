"""GGUF in, as transformers reads it: a GGUF file de-quantised once into a plain float32 safetensors folder (with
:mod:`headprune.loading.gguf_source`'s marker naming the file it came from), which every later load reuses."""

from __future__ import annotations

import shutil
import struct
import tempfile
from pathlib import Path

import torch

from headprune.core.extras import require
from headprune.core.hashing import sha256_file
from headprune.errors import UnsupportedModelError
from headprune.loading.gguf_header import check_head_counts
from headprune.loading.gguf_source import write_marker


def convert_gguf(path: Path, cache: Path) -> Path:
    """De-quantise a GGUF file once into a plain fp32 safetensors folder under ``cache``; reuse it after."""
    target = cache / "gguf" / f"{path.stem}-{sha256_file(path)[:16]}"
    if (target / "config.json").is_file():
        return target
    require("gguf", f"reading a .gguf model ({path.name})")
    from huggingface_hub.errors import StrictDataclassError  # transformers' configs check their fields
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    try:
        check_head_counts(path)  # named by key: transformers' config would refuse them in its own words
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except (OSError, ValueError, KeyError, IndexError, TypeError, EOFError, AssertionError, RuntimeError,
            ArithmeticError, struct.error, StrictDataclassError) as error:  # what a malformed file makes them raise
        if isinstance(error, UnsupportedModelError):
            raise
        why = " ".join(line.strip() for line in str(error).splitlines())[:200]  # a config field's error spans lines
        raise UnsupportedModelError(f"{path}: cannot read this GGUF file ({why})") from error
    # A de-quantised GGUF model cannot be save_pretrained-ed as is: rebuild it from a plain config.
    config_dict = model.config.to_dict()
    config_dict.pop("quantization_config", None)
    config_dict.pop("_name_or_path", None)
    config = AutoConfig.for_model(**config_dict)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".convert-", dir=target.parent))
    try:
        plain.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        write_marker(staging, path)
        staging.rename(target)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / "config.json").is_file():  # another process may have won the race
            raise
    return target
