"""The theory experiment's trained seeds, kept between test runs (training is most of the experiment's time).

A seed is trained once per version of the code that decides its weights: the key covers the sources of
``headprune/synthetic/`` that training runs, the settings, torch's and transformers' versions and the CPU
kernels torch uses here. Anything else (find, export, the analysis) runs every time. One test still trains a
seed from scratch every run (``test_training_ends_in_the_same_place_with_other_cpu_kernels``) and compares it with
the kept one. ``HEADPRUNE_TEST_CACHE`` moves the store (default ``~/.cache/headprune/tests``).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict
from pathlib import Path

import torch
import transformers
from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

import headprune.synthetic as synthetic
from headprune.core.io import atomic_folder
from headprune.synthetic.train import Settings, Snapshot, Trained, train

TRAINING_SOURCES = ("analysis.py", "data.py", "model.py", "train.py")


def store() -> Path:
    return Path(os.environ.get("HEADPRUNE_TEST_CACHE") or Path.home() / ".cache" / "headprune" / "tests")


def key(settings: Settings) -> str:
    digest = hashlib.sha256()
    for name in TRAINING_SOURCES:
        digest.update((Path(synthetic.__file__).parent / name).read_bytes())
    digest.update(json.dumps([asdict(settings), torch.__version__, transformers.__version__,
                              torch.backends.cpu.get_cpu_capability()], sort_keys=True).encode())
    return digest.hexdigest()[:16]


def trained(settings: Settings) -> Trained:
    """``train(settings)``, from the store when this code trained it before here; stored after training."""
    folder = store() / f"theory-seed{settings.seed}-{key(settings)}"
    if (folder / "history.json").is_file():
        record = json.loads((folder / "history.json").read_text())
        return Trained(GPT2LMHeadModel.from_pretrained(folder), PreTrainedTokenizerFast.from_pretrained(folder),
                       settings, [Snapshot(**snapshot) for snapshot in record["history"]], record["seconds"])
    model = train(settings)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with atomic_folder(folder, replace=True) as staging:  # whole or not at all
        model.model.save_pretrained(staging)
        model.tokenizer.save_pretrained(staging)
        (staging / "history.json").write_text(json.dumps(model.history_record()))
    return model
