"""Every user-facing choice list, in one module that imports nothing: the CLI's ``click.Choice`` and the library's
checks both read these, so a choice is added in one place (``--help`` stays instant: no torch here).

Where a list is also a registry's keys (export formats, task kinds, dtypes), ``tests/test_choices.py`` ties the two together.
The order is the one ``--help`` and error messages list them in.
"""

from __future__ import annotations

# find: the search (checked in headprune.search.settings)
RANK_KEYS = ("gain", "margin")
SCREENS = ("exact", "attribution", "halving")
OBJECTIVES = ("improve", "compress")
PREFER = ("heads", "groups")
SEARCHES = ("greedy", "beam")
PROTOCOLS = ("cel",)  # presets of the search (headprune.search.protocol)
NO_GUARD = "none"  # find --guard none: no guard, not even the default one (headprune.search.guards)

# Tasks: the kinds a task (file) may name; each has a scorer (headprune.scoring)
TASK_KINDS = ("choice", "generate", "text", "classify", "code")

# find, eval and export: what replaces an ablated head's output (headprune.surgery.ablation)
ABLATIONS = ("zero", "mean")

# export (headprune.exporter): formats are the registry's keys (headprune.exporter.formats), most portable first
EXPORT_FORMATS = ("safetensors", "onnx", "gguf")
EXPORT_LAYOUTS = ("sliced", "dense")
GGUF_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_k_m", "q5_k_m", "q6_k")  # K-quants: llama.cpp's quantizer

# Code tasks: the walls generated programs run behind (headprune.scoring.sandbox); auto takes the strongest here and
# refuses one that cannot keep HF_TOKEN and the user's files unreadable, which must then be named
SANDBOX_MODES = ("auto", "namespaces", "process", "plain")

# Loading a model (headprune.core.devices): precisions by torch name, and accelerate's placements
DTYPES = ("float32", "bfloat16", "float16")
LOAD_DTYPES = ("auto", *DTYPES)
DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")

__all__ = ["ABLATIONS", "DEVICE_MAPS", "DTYPES", "EXPORT_FORMATS", "EXPORT_LAYOUTS", "GGUF_TYPES", "LOAD_DTYPES",
           "NO_GUARD", "OBJECTIVES", "PREFER", "PROTOCOLS", "RANK_KEYS", "SANDBOX_MODES", "SCREENS", "SEARCHES",
           "TASK_KINDS"]
