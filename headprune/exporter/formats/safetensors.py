"""Safetensors: a checkpoint folder ``from_pretrained`` loads (sliced: with the code that rebuilds it).

The sliced layout keeps per-layer head counts stock classes cannot read, so ``modeling_headprune.py`` is
written beside the weights and registered in ``config.json``; the dense layout loads with the model's own
class. Checkpoint tensors the loading class does not use are written through unchanged
(:mod:`headprune.exporter.passthrough`). The verification loads the folder back the way a user would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headprune.exporter.formats.base import ExportFormat, Job, Written, register
from headprune.exporter.transformers_probe import StockLoading

if TYPE_CHECKING:  # pragma: no cover
    from headprune.exporter.export_record import ExportRecord


@register
class Safetensors(ExportFormat):
    name = "safetensors"
    library_name = "transformers"
    writes_through = True
    weight_suffixes = (".safetensors",)
    details_type = StockLoading  # a sliced export: whether stock transformers could load its per-layer head counts

    def write(self, job: Job, staging: Path, scratch: Path) -> Written:
        from headprune.exporter.passthrough import write_through
        from headprune.exporter.quantized import write_quantized
        from headprune.exporter.shards import shard_size
        from headprune.loading.models import load

        lm = job.lm
        lm.tokenizer.save_pretrained(staging)
        shard_bytes = shard_size(self.options.max_shard_size, self.name)
        job.artifact.save_pretrained(staging, **({} if shard_bytes is None else {"max_shard_size": shard_bytes}))
        if job.layout == "sliced":
            write_sliced_code(staging, type(lm.model).__name__, lm.model_class.auto_class)
        self.quantization = write_quantized(lm, staging)  # the checkpoint's quantization, where it holds
        if self.passthrough:
            write_through(lm.folder, staging, self.passthrough, lm.model_class.stands_in_for)
        exported = load(staging, dtype=lm.dtype, device=lm.device)
        return Written(exported, exported.model, exported.model, "the checkpoint loaded back from disk")

    def runtime_check(self, job: Job, written: Written) -> tuple[Any, Any]:
        """A sliced export records whether the installed transformers loads per-layer head counts with the family's
        own class (:mod:`headprune.exporter.transformers_probe`, run here, not assumed)."""
        from headprune.exporter.transformers_probe import probe

        if job.layout != "sliced":
            return None, None
        return None, probe(str(getattr(job.lm.model.config, "model_type", "")), job.lm.adapter)

    @classmethod
    def summary_lines(cls, record: ExportRecord) -> list[str]:
        stock = cls.details(record)
        return [] if stock is None or stock.per_layer_heads else [
            f"note: transformers {stock.transformers} cannot load per-layer head counts for {stock.model_type} "
            f"without remote code ({stock.reason}); for servers that run only stock classes: --layout dense"]

    @classmethod
    def load_hint(cls, record: ExportRecord, out: str) -> str:
        if record.layout != "sliced":
            return f'{record.auto_class}.from_pretrained("{out}")'
        if record.auto_class is None:  # no auto class loads it: only headprune rebuilds it
            return f'headprune.load("{out}")'
        return f'headprune.load("{out}")  or  {record.auto_class}.from_pretrained("{out}", trust_remote_code=True)'

    @classmethod
    def card_usage(cls, record: ExportRecord) -> list[str]:
        auto = record.auto_class or "AutoModel"
        if record.layout == "sliced" and record.auto_class is None:
            return ["```python", "import headprune", 'model = headprune.load("PATH")', "```"]
        if record.layout == "sliced":
            return ["```python", f"from transformers import {auto}, AutoTokenizer",
                    f'model = {auto}.from_pretrained("PATH_OR_REPO", trust_remote_code=True)',
                    "# or, with headprune installed: headprune.load(\"PATH\")", "```", "",
                    f"Layers have different head counts, which {_stock_words(cls.details(record))}; the small "
                    "`modeling_headprune.py` next to the weights (it imports only torch and transformers) rebuilds "
                    "the shapes recorded in `config.json` under `headprune`." + (
                        "" if cls.details(record) is None else " Servers that run only stock classes (vLLM) take "
                        "the dense layout (`headprune export --layout dense`): the same shapes, the heads zeroed.")]
        return ["```python", f"from transformers import {auto}", f'model = {auto}.from_pretrained("PATH_OR_REPO")',
                "```"]


def _stock_words(stock: StockLoading | None) -> str:
    """What the card says of stock transformers and per-layer head counts (as probed at export, where recorded)."""
    if stock is None:
        return "stock transformers classes cannot express"
    if stock.per_layer_heads:
        return (f"transformers {stock.transformers} can express for `{stock.model_type}` through `per_layer_config` "
                "(this export still loads through its own code)")
    return (f"transformers {stock.transformers} cannot load for `{stock.model_type}` without remote code (checked when "
            f"exported: {stock.reason})")


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
