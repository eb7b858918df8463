"""Safetensors: a checkpoint folder ``from_pretrained`` loads (sliced: with the code that rebuilds it).

The sliced layout keeps per-layer head counts stock classes cannot read, so ``modeling_headprune.py`` is
written beside the weights and registered in ``config.json``; the dense layout loads with the model's own
class. Checkpoint tensors the loading class does not use are written through unchanged
(:mod:`headprune.exporter.passthrough`). The verification loads the folder back the way a user would.
"""

from __future__ import annotations

import json
from pathlib import Path

from headprune.exporter.formats.base import ExportFormat, Job, Written, register


@register
class Safetensors(ExportFormat):
    name = "safetensors"
    writes_through = True

    def write(self, job: Job, staging: Path, scratch: Path) -> Written:
        from headprune.exporter.passthrough import write_through
        from headprune.exporter.shards import shard_size
        from headprune.loading.models import load

        lm = job.lm
        lm.tokenizer.save_pretrained(staging)
        shard_bytes = shard_size(self.options.max_shard_size, self.name)
        job.artifact.save_pretrained(staging, **({} if shard_bytes is None else {"max_shard_size": shard_bytes}))
        if job.layout == "sliced":
            write_sliced_code(staging, type(lm.model).__name__, lm.model_class.auto_class)
        if self.passthrough:
            write_through(lm.folder, staging, self.passthrough, lm.model_class.stands_in_for)
        exported = load(staging, dtype=lm.dtype, device=lm.device)
        return Written(exported, exported.model, exported.model, "the checkpoint loaded back from disk")


def write_sliced_code(folder: Path, base_class: str, auto_class: str | None) -> None:
    """``modeling_headprune.py`` beside the weights, registered in config.json under the auto class of the
    model's own head, so ``AutoModelFor<Head>.from_pretrained(folder, trust_remote_code=True)`` rebuilds it."""
    from headprune.surgery import remote_modeling

    source = Path(remote_modeling.__file__).read_text(encoding="utf-8")
    (folder / "modeling_headprune.py").write_text(source.replace('"{base_class}"', json.dumps(base_class)),
                                                  encoding="utf-8")
    config_path = folder / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if auto_class is not None:
        config["auto_map"] = {auto_class: "modeling_headprune.HeadprunedModel"}
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
