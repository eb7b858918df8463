"""ONNX: export a (sliced) model's head output with dynamic batch and sequence, and run it with onnxruntime.

Decoders take ``input_ids, attention_mask, position_ids``, encoders ``input_ids, attention_mask``. The output
is the model's own head's (``logits``: a language-model, masked-LM or classification head), or
``last_hidden_state`` for a bare base model. Exported with torch's dynamo exporter.

Language models of the families ONNX Runtime GenAI runs (:data:`GENAI_TYPES`) are exported as a decoder with a
key/value cache instead, in the layout Optimum and ONNX Runtime GenAI use: inputs ``past_key_values.{i}.key``
/ ``.value`` (``batch, kv_heads, past, head_dim``; an empty past for the first step), outputs ``logits`` and
``present.{i}.key`` / ``.value``, with a ``genai_config.json`` beside it, so ``onnxruntime_genai.Model(folder)``
loads and generates. Each layer's ``past_key_values.{i}`` input has that layer's key/value head count, which an
ONNX Runtime GenAI with per-layer counts reads (whether the installed one does is :mod:`genai_probe`'s question;
the ONNX format writes the dense layout where it does not). A recurrent layer (LFM2's convolutions, Granite 4's
Mamba2, Qwen3.5's Gated DeltaNets) takes its states as inputs and gives them back as outputs instead, and a layer
keeping nothing (Gemma 4's key/value-sharing layers) has none, in GenAI's names (:mod:`decoder_cache`).
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch
from torch import nn

from headprune.errors import UnsupportedModelError
from headprune.exporter.onnx.decoder_cache import CONV, KEY, RECURRENT, VALUE, FlatCache, layer_states
from headprune.loading.adapters import FAMILIES

ONNX_NAME = "model.onnx"
GENAI_CONFIG = "genai_config.json"
OUTPUTS = ("logits", "last_hidden_state")
# model_type -> the model type ONNX Runtime GenAI names it by (its decoder-only types, as each family file declares
# them; each run by the export's gate)
GENAI_TYPES = {t: f.genai for t, f in sorted(FAMILIES.items()) if f.genai}
# GenAI model types whose cache is one tensor a layer, keys and values stacked ``(2, batch, heads, sequence, head)``
# (``past_%d`` / ``present_%d``), with one head count for every layer (GenAI's ``CombinedKeyValueCache``)
COMBINED_CACHE = {"gpt2"}
# GenAI model types whose recurrent layers' states (:mod:`decoder_cache`) GenAI keeps in its ``ConvKeyValueCache``:
# it reads ``layer_types`` and ``conv_cache_size`` from the config (its model builder's lfm2.py) and keeps the keys
# and values of every attention layer with one head count
CONV_CACHE = {"lfm2"}


def onnx_output(head: str) -> str:
    """The output an ONNX export of a model with this head carries.

    Raises:
        UnsupportedModelError: a head whose outputs are not one ``logits`` tensor (question answering, ...).
    """
    if head == "base":
        return "last_hidden_state"
    if head in ("causal-lm", "masked-lm", "sequence-classification", "token-classification"):
        return "logits"
    raise UnsupportedModelError(f"ONNX export supports models with a language-model, masked-LM or classification "
                                f"head, or none; this model has a {head} head (use format safetensors)")


@contextmanager
def _traceable_experts(model: nn.Module) -> Iterator[None]:
    """Mixture-of-experts layers (Mixtral, Qwen3-MoE, OLMoE) computed by transformers' ``batched_mm`` experts for the
    export: its default loop over the experts a batch routes to has data-dependent shapes the ONNX converter cannot
    write; ``batched_mm`` gathers each token's experts' weights, the same sums. Restored afterwards."""
    current = getattr(model.config, "_experts_implementation", None)
    if current in (None, "batched_mm") or not hasattr(model, "set_experts_implementation"):
        yield
        return
    model.set_experts_implementation("batched_mm")
    try:
        yield
    finally:
        model.set_experts_implementation(current)


@contextmanager
def _traceable(model: nn.Module) -> Iterator[None]:
    """The model as torch's ONNX exporter can trace it: experts through ``batched_mm``, and whatever its family file
    says (``Family.traceable``). Restored afterwards."""
    family = FAMILIES.get(getattr(model.config, "model_type", ""))
    with _traceable_experts(model), (family.traceable(model) if family and family.traceable else nullcontext()):
        yield


class _Outputs(nn.Module):
    """The model's forward reduced to the exported inputs and one output."""

    def __init__(self, model: nn.Module, output: str) -> None:
        super().__init__()
        self.model, self.output = model, output

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        extra = {} if position_ids is None else {"position_ids": position_ids, "use_cache": False}
        return getattr(self.model(input_ids=input_ids, attention_mask=attention_mask, **extra), self.output)


def export_onnx(model: nn.Module, path: Path, *, output: str, positions: bool) -> None:
    """Write ``model`` as ONNX to ``path`` (weights embedded; dynamic batch and sequence axes).

    Args:
        output: ``logits`` or ``last_hidden_state`` (see :func:`onnx_output`).
        positions: the graph takes ``position_ids`` (decoders, which are padded on the left).
    """
    wrapper = _Outputs(model, output).eval()  # a new wrapper is in train mode
    # Rows of a few tokens, or as many as the family's file says (Family.onnx_tokens: a Mamba2 scan traced over one
    # chunk gives a graph that refuses two)
    family = FAMILIES.get(getattr(model.config, "model_type", ""))
    tokens = family.onnx_tokens(model.config) if family and family.onnx_tokens else 5
    ids = 5 + torch.arange(tokens).repeat(2, 1) % 50  # (2, tokens); the second row padded on the left by two
    mask = torch.ones_like(ids)
    ids[1, :2], mask[1, :2] = 0, 0
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence")
    names = ["input_ids", "attention_mask"] + (["position_ids"] if positions else [])
    args: tuple = (ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)) if positions else (ids, mask)
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    with warnings.catch_warnings(), _traceable(model):
        warnings.simplefilter("ignore")
        program = torch.onnx.export(wrapper, args, dynamo=True, input_names=names, output_names=[output],
                                    dynamic_shapes={name: {0: batch, 1: seq} for name in names}, verbose=False)
    program.save(str(path), external_data=False)


def generates(model_type: str, head: str) -> bool:
    """Whether an ONNX export of this model is a decoder with a key/value cache for ONNX Runtime GenAI."""
    return head == "causal-lm" and model_type in GENAI_TYPES


def export_decoder(model: nn.Module, folder: Path, *, eos: tuple[int, ...], pad: int, bos: int | None) -> dict:
    """Write ``model`` as a decoder with a key/value cache (``model.onnx``) and its ``genai_config.json``;
    returns the GenAI config. Layers may keep different key/value head counts: each layer's past and present
    tensors have its own (``num_key_value_heads`` in the config is the largest). A recurrent layer takes and gives
    its states instead (:mod:`decoder_cache`).
    """
    config = model.config
    states = layer_states(model)
    counts = [entry[KEY][0] for entry in states if KEY in entry]
    head_dim = next(entry[KEY][1] for entry in states if KEY in entry)  # the first's (Gemma 4's layers differ: GenAI
    # reads each layer's from the graph; a per-layer config has no one head_dim)
    combined = GENAI_TYPES[config.model_type] in COMBINED_CACHE
    if combined and len(set(counts)) > 1:  # the ONNX format writes such a model dense (ONNX.layout_for)
        raise ValueError(f"a combined key/value cache takes one head count for every layer, not {counts}")
    family = FAMILIES.get(config.model_type)  # (a Mamba2 scan is traced over its chunks: Family.onnx_tokens)
    batch, past_len, width = 2, 3, family.onnx_tokens(config) if family and family.onnx_tokens else 4
    ids = torch.randint(2, 50, (batch, width))
    mask = torch.ones(batch, past_len + width, dtype=torch.long)
    positions = torch.arange(past_len, past_len + width).expand(batch, width)
    b, s, t, p = (torch.export.Dim(n) for n in ("batch", "sequence", "total_sequence", "past_sequence"))
    past: list[torch.Tensor] = []
    past_shapes: list[dict] = []
    names: tuple[list[str], list[str]] = ([], [])
    for layer, entry in enumerate(states):  # (a layer keeping nothing has no inputs)
        if combined and entry:
            heads, size = entry[KEY]
            past.append(torch.randn(2, batch, heads, past_len, size))
            past_shapes.append({1: b, 3: p})
            names[0].append(f"past_{layer}")
            names[1].append(f"present_{layer}")
            continue
        for name, shape in entry.items():
            attention = name in (KEY, VALUE)  # (batch, heads, past, head_dim); a state: every size but the batch fixed
            past.append(torch.randn(batch, shape[0], past_len, shape[1]) if attention else torch.randn(batch, *shape))
            past_shapes.append({0: b, 2: p} if attention else {0: b})
            names[0].append(f"past_key_values.{layer}.{name}" if attention else f"past.{layer}.{name}")
            names[1].append(f"present.{layer}.{name}")
    inputs = ["input_ids", "attention_mask", "position_ids", *names[0]]
    outputs = ["logits", *names[1]]
    shapes = ({0: b, 1: s}, {0: b, 1: t}, {0: b, 1: s}, tuple(past_shapes))
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    args = (ids, mask, positions, *past)
    with warnings.catch_warnings(), _traceable(model):
        warnings.simplefilter("ignore")
        traced: Any = FlatCache(model, states, combined).eval()
        if any(CONV in entry for entry in states):  # (a model with recurrent layers: see _capture)
            traced, shapes = _capture(traced, args, shapes), None
        program = torch.onnx.export(traced, args, dynamo=True, input_names=inputs, output_names=outputs,
                                    dynamic_shapes=shapes, verbose=False)
    program.save(str(folder / ONNX_NAME), external_data=False)
    genai = _genai_config(config, states, head_dim, max(counts), combined, eos=eos, pad=pad, bos=bos)
    (folder / GENAI_CONFIG).write_text(json.dumps(genai, indent=2) + "\n", encoding="utf-8")
    return genai


def _capture(module: nn.Module, args: tuple, shapes: tuple) -> Any:
    """``module``'s program captured by torch.export (not strict). Where the model's code ties the dynamic sizes (a
    Mamba2 scan's chunks), captured again as the ONNX exporter's own capture does it: sizes of 0 or 1 kept dynamic,
    guards deferred to runtime asserts. Not the ONNX exporter's capture itself, nor those settings first: either
    loses a token scan's output shape where two layers scan (``Family.traceable``: Qwen3.5's Gated DeltaNets;
    measured, torch 2.13)."""
    from torch.fx.experimental import _config as shape_config

    try:
        return torch.export.export(module, args, dynamic_shapes=shapes)
    except torch._dynamo.exc.UserError:  # (what torch.export raises for a violated dynamic size)
        with shape_config.patch(backed_size_oblivious=True):
            return torch.export.export(module, args, dynamic_shapes=shapes,
                                       prefer_deferred_runtime_asserts_over_guards=True)


def _genai_config(config: Any, states: list[dict], head_dim: int, kv_heads: int, combined: bool, *,
                  eos: tuple[int, ...], pad: int, bos: int | None) -> dict:
    """The ``genai_config.json`` of a decoder :func:`export_decoder` wrote: its cache's names, as GenAI's model
    builder writes them for its type (and for :data:`CONV_CACHE`'s, ``layer_types`` and the state's length)."""
    if combined:
        cache_io = {"past_names": "past_%d"}, {"present_names": "present_%d"}
    else:
        cache_io = ({"past_key_names": "past_key_values.%d.key", "past_value_names": "past_key_values.%d.value"},
                    {"present_key_names": "present.%d.key", "present_value_names": "present.%d.value"})
    for name in (CONV, RECURRENT):
        if any(name in entry for entry in states):
            cache_io[0][f"past_{name}_names"], cache_io[1][f"present_{name}_names"] = f"past.%d.{name}", \
                f"present.%d.{name}"
    decoder: dict[str, Any] = {}
    if GENAI_TYPES[config.model_type] in CONV_CACHE:
        decoder = {"layer_types": list(config.layer_types),
                   "conv_cache_size": next(entry[CONV][1] for entry in states if CONV in entry)}
    return {
        "model": {
            "type": GENAI_TYPES[config.model_type], "vocab_size": config.vocab_size,
            "context_length": int(getattr(config, "max_position_embeddings", 2048)),
            "bos_token_id": bos if bos is not None else eos[0], "eos_token_id": list(eos) if len(eos) > 1 else eos[0],
            "pad_token_id": pad,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": ONNX_NAME, "head_size": head_dim, "hidden_size": config.hidden_size,
                "num_attention_heads": config.num_attention_heads, "num_key_value_heads": kv_heads,
                "num_hidden_layers": len(states), **decoder,
                "inputs": {"input_ids": "input_ids", "attention_mask": "attention_mask", "position_ids": "position_ids",
                           **cache_io[0]},
                "outputs": {"logits": "logits", **cache_io[1]},
            },
        },
        "search": {"do_sample": False, "num_beams": 1, "num_return_sequences": 1, "max_length":
                   int(getattr(config, "max_position_embeddings", 2048)), "min_length": 0,
                   "past_present_share_buffer": False, "top_k": 1, "top_p": 1.0, "temperature": 1.0,
                   "repetition_penalty": 1.0},
    }


def genai_version() -> tuple[str | None, str]:
    """``(version, "")`` when onnxruntime-genai can be imported, else ``(None, why not)``."""
    try:
        import onnxruntime_genai as og
    except ImportError as error:
        return None, f"onnxruntime-genai is not installed ({error}); pip install 'headprune[onnx]'"
    return getattr(og, "__version__", "?"), ""
