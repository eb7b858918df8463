"""Whether the installed ONNX Runtime GenAI runs a decoder whose layers keep different numbers of key/value heads,
decided by running one: a version string says nothing of what a build does.

ONNX Runtime GenAI allocated its key/value cache with one ``num_key_value_heads`` for every layer until its
``DefaultKeyValueCache`` learned to read each layer's count from the graph's ``past_key_values.{i}`` input shapes
(microsoft/onnxruntime-genai pull request 2214, 2026). The probe exports a two-layer Llama, sliced so that its layers
keep 2 and 1 key/value heads, with :func:`export.export_decoder`, and has GenAI decode it greedily: it supports
per-layer counts when it loads the folder and decodes the torch model's tokens with its logits within the ONNX
tolerance. The verdict is kept for the process (one probe per installed version).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

_VERDICTS: dict[str, tuple[bool, str]] = {}
PROBE_TOLERANCE = 5e-5  # the ONNX format's own (formats/onnx.py): the same kernels, summed in another order


def per_layer_kv_heads() -> tuple[bool, str]:
    """``(True, how it was checked)`` when the installed GenAI runs per-layer key/value head counts, else
    ``(False, why not)``: not installed, the folder refused, or decoded otherwise than torch."""
    from headprune.exporter.onnx.export import genai_version

    version, reason = genai_version()
    if version is None:
        return False, reason
    if version not in _VERDICTS:
        _VERDICTS[version] = _probe(version)
    return _VERDICTS[version]


def _probe(version: str) -> tuple[bool, str]:
    import torch

    from headprune.exporter.onnx.export import export_decoder
    from headprune.exporter.runtimes import GenaiRunner, TorchRunner
    from headprune.heads import parse_heads
    from headprune.loading.models import wrap_model
    from headprune.surgery.plan import plan_layers
    from headprune.surgery.slicing import slice_model
    from headprune.testing import tiny_model

    lm = wrap_model(tiny_model("llama", 64, seed=0, layers=2), None)  # 4 query heads, 2 key/value heads a layer
    removed = parse_heads("L1.H0,L1.H1")  # layer 1 loses a whole key/value group: it keeps 1, layer 0 keeps 2
    artifact = slice_model(lm, plan_layers(lm.grid, removed), removed).eval()
    prompt, steps = [5, 9, 13, 17, 21], 6
    what = f"ONNX Runtime GenAI {version}"
    with tempfile.TemporaryDirectory(prefix="headprune-genai-probe-") as folder:
        export_decoder(artifact, Path(folder), eos=(1,), pad=0, bos=None)
        try:
            runner = GenaiRunner(Path(folder))
            got, got_logits = runner.greedy(prompt, steps)
            runner.close()
        except Exception as error:  # noqa: BLE001 - any refusal of the folder is the answer: GenAI cannot run it
            return False, f"{what} cannot run layers with different key/value head counts ({type(error).__name__}: " \
                          f"{str(error).splitlines()[0][:160] if str(error) else ''})"
    with torch.inference_mode():
        want, want_logits = TorchRunner(artifact, eos=(1,)).greedy(prompt, steps)  # GenAI stops at eos too
    diff = max(float((a - b).abs().max()) for a, b in zip(want_logits, got_logits)) if got_logits else float("inf")
    scale = max(float(a.abs().max()) for a in want_logits)
    if got != want or diff > PROBE_TOLERANCE * max(1.0, scale):
        return False, (f"{what} loads layers with different key/value head counts but decodes them otherwise than "
                       f"torch (largest logit difference {diff:.3g})")
    return True, (f"{what} runs layers with different key/value head counts (checked here: a two-layer decoder "
                  f"keeping 2 and 1 decoded like torch, largest logit difference {diff:.1e})")
