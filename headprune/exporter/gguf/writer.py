"""GGUF for llama.cpp (and ollama, LM Studio, ...): write a pruned model, read it back, run it.

Layouts:

- ``dense``: the family's stock llama.cpp architecture (``llama``, ``qwen2``, ``phi3``, ...:
  :mod:`headprune.exporter.gguf.families`), every layer with the original head counts; a removed head's
  ``attn_output`` columns are zero. Any llama.cpp loads it.
- ``sliced`` (the families whose ``Gguf`` is not dense only: Llama, Mistral, Qwen2, ...): heads physically removed,
  written as llama.cpp's ``deci`` architecture, which reads ``{arch}.attention.head_count`` and ``.head_count_kv`` as
  per-layer arrays (``src/models/deci.cpp``). The other graphs cannot: their tensor shapes use layer 0's counts for
  every layer (``llm_graph_context::n_head = hparams.n_head()``), so arrays there would only load when all layers
  agree. A family whose own graph reads them per layer (``Gguf.per_layer``: Gemma 4's, Granite 4's, Nemotron-H's) is
  written sliced in its own architecture.

Facts taken from llama.cpp's converter (``convert_hf_to_gguf.py``: ``LlamaModel``, ``DeciModel``, the
``TextModel`` defaults, each family's class). The files are run in llama.cpp by :mod:`headprune.exporter.runtimes`.

- tensor names through ``gguf.get_tensor_name_map`` (``token_embd``, ``blk.N.attn_q``, ...);
- Hugging Face stores Llama's query and key rows in "rotate half" order; llama.cpp's ``llama``, ``deci``,
  ``granite`` and ``olmo`` graphs rotate adjacent pairs, so q and k rows (and biases) are permuted per head
  (``LlamaModel.permute``; ``GgufFamily.permuted``). The others rotate halves (NeoX) or get checkpoints already in
  pairs (GLM-4, Cohere) and take the rows as they are;
- ``attention.key_length`` / ``value_length`` are always written: llama.cpp otherwise derives the head size
  from layer 0's head count, which a sliced layer 0 no longer has;
- experts: :mod:`headprune.exporter.gguf.experts`; GPT-2's ``Conv1D`` weights and NeoX's per-head fused q/k/v:
  the family's q/k/v layout (``QkvLayout.to_llama_cpp``, :mod:`headprune.surgery.remote_modeling`); RoPE scalings' keys and factor tensors:
  :mod:`headprune.exporter.gguf.rope`; the tokenizer:
  :mod:`headprune.exporter.gguf.tokenizer`; reading the file back:
  :mod:`headprune.exporter.gguf.read`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from headprune.errors import UnsupportedModelError
from headprune.heads import ATTENTION
from headprune.exporter.gguf.families import (ERF_GELU_NOTE, GELU_NOTE, OTHER_FORMATS, PERMUTED_ARCHES,
                                              family_of, qkv_of, rope_parameters)
from headprune.exporter.gguf.encoders import ENCODER_NOTE, GELU_TABLE_NOTE
from headprune.exporter.gguf.experts import split_experts
from headprune.exporter.gguf.quant import K_QUANTS, typer
from headprune.exporter.gguf.read import read_back
from headprune.exporter.gguf.rope import add_rope_keys, rope_dimensions, rope_notes, rope_tensors
from headprune.exporter.gguf.tokenizer import tokenizer_writer

GGUF_NAME = "model.gguf"


def permute(weight: torch.Tensor, head_dim: int) -> torch.Tensor:
    """llama.cpp's ``LlamaModel.permute``: per head, rows in "rotate half" order -> adjacent pairs."""
    heads = weight.shape[0] // head_dim
    return (weight.reshape(heads, 2, head_dim // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape))


def unpermute(weight: torch.Tensor, head_dim: int) -> torch.Tensor:
    heads = weight.shape[0] // head_dim
    return (weight.reshape(heads, head_dim // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape))


@dataclass(frozen=True)
class GgufPlan:
    """What a GGUF file of the artifact holds: its architecture and per-layer attention head counts (0 in a layer
    without attention: llama.cpp's hybrids size their other layers by keys of their own)."""

    arch: str
    head_count: tuple[int, ...]
    head_count_kv: tuple[int, ...]
    head_dim: int  # the attention layers' (the first's)
    permuted: bool  # q/k rows permuted to llama.cpp's rotation
    # attention.key_length, value_length, rope.dimension_count: the heads' (0) or, where llama.cpp caches one latent
    # key/value head a layer (Gguf.latent: MLA), the latent's, with no values cached apart
    key_length: int = 0
    value_length: int = 0
    rope_dims: int = 0
    values_cached: bool = True


def gguf_plan(lm: Any, arch: str, plans: Any) -> GgufPlan:
    """The file's head counts: the sliced layers' (``plans``, where the file is sliced), else the model's own."""
    layers = lm.grid.layers
    attention = [layer.kind == ATTENTION for layer in layers]
    if plans is not None:
        heads = tuple(len(p.q_heads) for p in plans)
        kv = tuple(len(p.kv_heads) for p in plans)
    else:
        heads = tuple(layer.heads if a else 0 for layer, a in zip(layers, attention))
        kv = tuple(layer.kv_heads if a else 0 for layer, a in zip(layers, attention))
    # key_length: the attention layers' head size; where it differs (Gemma 4), the full-attention layers' widest one
    # (the family's keys write the sliding layers' as key_length_swa)
    head_dim = max((layer.head_dim for layer, a in zip(layers, attention) if a), default=0)
    family = family_of(lm.model.config)
    if family.latent is not None:  # one latent key/value head a layer (MLA), whatever the heads
        key, value, rope = family.latent(lm.model.config)
        return GgufPlan(arch, heads, tuple(int(a) for a in attention), head_dim, arch in PERMUTED_ARCHES, key, value,
                        rope, values_cached=False)
    # rows already in adjacent pairs (ERNIE 4.5): deci takes them as they are
    return GgufPlan(arch, heads, kv, head_dim, arch in PERMUTED_ARCHES and not family.pairs)


# Tensors llama.cpp reads without a suffix (``tn(LLM_TENSOR_SSM_A, il)``): a state-space layer's A and D.
NO_SUFFIX = (".ssm_a", ".ssm_d")


def gguf_name(names: Any, name: str, renamed: tuple[tuple[str, str], ...] = ()) -> str | None:
    """The GGUF tensor a model tensor is stored as (``names``: gguf's tensor name map; ``renamed``: the family's
    ``Gguf.renamed``), None where llama.cpp's graph has no place for it; a parameter without a ``.weight`` suffix
    (GPT-OSS's ``sinks``) gets one, as the converter gives it, but for :data:`NO_SUFFIX`; a name gguf-py maps with its
    suffix (Falcon-H1's ``pre_ff_layernorm.weight``) keeps none, as the converter writes it and llama.cpp reads it.
    Experts' fused tensors: :mod:`headprune.exporter.gguf.experts`."""
    for ours, theirs in renamed:
        name = name.replace(ours, theirs)
    # the converter's spelling of a router's correction bias (ModelBase.modify_tensors), which gguf-py maps
    name = name.replace("e_score_correction_bias", "e_score_correction.bias")
    # (".scale": a tensor llama.cpp reads as a scale beside a weight, such as Gemma 4's router's, renamed to it)
    new = names.get_name(name, try_suffixes=(".weight", ".bias", ".scale"))
    if new is not None and not new.endswith((".weight", ".bias", ".scale", *NO_SUFFIX)) and \
            not name.endswith((".weight", ".bias")):
        new += ".weight"
    return new


def gguf_tensors(artifact: torch.nn.Module, plan: GgufPlan) -> dict[str, torch.Tensor]:
    """The artifact's tensors under their GGUF names, in float32, q/k permuted where the graph needs it, and the
    tensors llama.cpp derives from the config (``rope_freqs`` for Llama 3.1-style RoPE): every tensor the file holds.

    Raises:
        UnsupportedModelError: a tensor llama.cpp's graph has no place for (it would be lost).
    """
    import gguf

    arch_enum = next((a for a, name in gguf.MODEL_ARCH_NAMES.items() if name == plan.arch), None)
    if arch_enum is None or not all(hasattr(gguf.GGUFWriter, m) for m in family_of(artifact.config).writes_with):
        from importlib.metadata import version

        raise UnsupportedModelError(f"the installed gguf ({version('gguf')}) does not know llama.cpp's {plan.arch} "
                                    "architecture: a newer gguf writes it (pip install -U gguf)")
    names = gguf.get_tensor_name_map(arch_enum, len(plan.head_count))
    state = artifact.state_dict()
    family, layout = family_of(artifact.config), qkv_of(artifact.config)
    tied = bool(getattr(artifact.config, "tie_word_embeddings", False)) and not family.own_output
    out: dict[str, torch.Tensor] = {}
    offset = family.position_offset(artifact.config) if family.position_offset else 0
    for name, tensor in state.items():
        dropped = bool(family.dropped) and name.startswith(family.dropped)  # the converter leaves it out too
        scalar = name.endswith(tuple(f".{part}" for part, _ in family.layer_scalars))  # in the metadata: scalar_keys
        if name.endswith("rotary_emb.inv_freq") or (tied and name == "lm_head.weight") or dropped or scalar:
            continue
        data = tensor.detach().to("cpu", torch.float32)
        parts = split_experts(name, data, family.experts)
        if parts is None and family.split is not None:  # (MLA's kv_b_proj: attn_k_b and attn_v_b)
            parts = family.split(name, data, artifact.config)
        if parts is not None:
            out.update(parts)
            continue
        mapped, data = family.tensors.to_llama_cpp(name, data, artifact.config)
        new = gguf_name(names, mapped, family.renamed)
        if new is None:
            raise UnsupportedModelError(f"GGUF export: no llama.cpp tensor for {name} (it would be lost); this "
                                        f"model can be exported as {OTHER_FORMATS}")
        if new.endswith("norm.weight"):
            data = data + family.norm_offset
        if new == "position_embd.weight":  # RoBERTa's rows before its first position are not in the file
            data = data[offset:]
        if plan.permuted and (".attn_q." in new or ".attn_k." in new):
            data = permute(data, plan.head_dim)
        data = layout.to_llama_cpp(name, data, plan.head_dim)  # GPT-2's Conv1D, NeoX's fused q/k/v
        out[new] = data.contiguous()
    out.update(rope_tensors(artifact.config, plan.head_dim))
    return out


def scalar_keys(writer: Any, artifact: torch.nn.Module) -> None:
    """The family's per-layer scalar parameters (``Gguf.layer_scalars``) as llama.cpp reads them: one array a key,
    a value a layer (written by name: gguf-py 0.14 has none of these keys' writers)."""
    state = artifact.state_dict()
    for part, key in family_of(artifact.config).layer_scalars:
        values = {}
        for name, tensor in state.items():
            layer = name.removesuffix(f".{part}").rpartition(".")[2]
            if name.endswith(f".{part}") and layer.isdigit():
                values[int(layer)] = float(tensor.float().reshape(-1)[0])
        writer.add_array(key, [values[i] for i in sorted(values)])


# Matrices kept in float32 whatever the type, as the converter keeps them (its tensor_force_quant): llama.cpp's bert
# graph adds a row of the token types to the embeddings, which its CPU add does not take from f16 or q8_0 (it aborts);
# its state-space convolution (ggml_ssm_conv) takes float32 kernels only, and its Mamba2 scan (ggml_ssm_scan) a float32
# A and D (a column each: the converter squeezes them to one axis, so float32), as the converter keeps the grouped
# norm's gain (a ``_norm.weight``) and LFM2's short-convolution kernel.
FLOAT32_TENSORS = ("token_types.weight", ".ssm_conv1d.weight", ".ssm_a", ".ssm_d", ".ssm_norm.weight",
                   ".shortconv.conv.weight")


def _typed(name: str, data: np.ndarray, gguf_type: str) -> tuple[np.ndarray, Any]:
    """The array to store and its GGML type: 1-D tensors (norms, biases), the experts' stacked biases and
    :data:`FLOAT32_TENSORS` stay float32, as the converter keeps them (llama.cpp's graph adds them in float32);
    matrices take the requested type
    (q8_0 falls back to f16 for rows that are not a multiple of 32)."""
    import gguf
    from gguf.quants import QuantError, quantize

    qt = gguf.GGMLQuantizationType
    if data.ndim == 1 or name.endswith((".bias", *FLOAT32_TENSORS)) or gguf_type == "f32":
        return data.astype(np.float32), qt.F32
    if gguf_type == "f16":
        return data.astype(np.float16), qt.F16
    if gguf_type == "bf16":
        return quantize(data, qt.BF16), qt.BF16
    try:
        return quantize(data, qt.Q8_0), qt.Q8_0
    except QuantError:
        return data.astype(np.float16), qt.F16


# gguf.LlamaFileType: ALL_F32, MOSTLY_F16, ...; the K-quants' are quant's.
FILE_TYPES = {"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32, **{t: ftype for t, (ftype, _) in K_QUANTS.items()}}


def file_name(gguf_type: str) -> str:
    """The export's GGUF file: ``model.gguf`` in float32, else with its type as llama.cpp names it
    (``model-Q4_K_M.gguf``, ``model-F16.gguf``)."""
    return GGUF_NAME if gguf_type == "f32" else f"model-{gguf_type.upper()}.gguf"


def write_gguf(path: Path, artifact: torch.nn.Module, plan: GgufPlan, tensors: dict[str, torch.Tensor],
               tokenizer_writer: Any, *, name: str, gguf_type: str) -> dict[str, str]:
    """Write one GGUF file: metadata as llama.cpp's converter writes it, the tokenizer, the tensors; returns each
    tensor's GGML type."""
    import gguf

    config = artifact.config
    writer = gguf.GGUFWriter(str(path), plan.arch)
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(name)
    family = family_of(config)
    writer.add_block_count(len(plan.head_count))
    offset = family.position_offset(config) if family.position_offset else 0
    writer.add_context_length(int(config.max_position_embeddings) - offset)
    writer.add_embedding_length(int(config.hidden_size))
    ffn = family.ffn_length(config) if family.ffn_length else int(config.intermediate_size)
    if ffn:  # (a mixture of experts without a dense MLP has none: its experts' widths are keys of their own)
        writer.add_feed_forward_length(ffn)
    # One count where every attention layer has it (a hybrid's other layers are told apart by keys of their own, or
    # by their 0 key/value heads: kv_marks_recurrent)
    heads, kv = ({n for n in counts if n} for counts in (plan.head_count, plan.head_count_kv))
    if family.kv_marks_recurrent:
        most = max(plan.head_count)  # (read in a layer without attention; its key/value heads, 0, mark it)
        writer.add_head_count([n or most for n in plan.head_count])
        writer.add_head_count_kv(list(plan.head_count_kv))
    elif plan.arch == "deci" or len(heads) > 1 or len(kv) > 1:
        writer.add_head_count(list(plan.head_count))
        writer.add_head_count_kv(list(plan.head_count_kv))
    else:
        writer.add_head_count(heads.pop())
        writer.add_head_count_kv(kv.pop())
    writer.add_key_length(plan.key_length or plan.head_dim)
    writer.add_value_length(plan.value_length or plan.head_dim)
    if getattr(config, "rms_norm_eps", None) is not None:  # LayerNorm families write theirs with their own keys
        writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    rope = rope_parameters(config)
    if family.rotary:
        writer.add_rope_freq_base(float(rope["rope_theta"]))
    if plan.arch != "qwen2":
        if family.rotary:  # Phi-4-mini, Pythia and others rotate only part of each head (partial_rotary_factor)
            writer.add_rope_dimension_count(plan.rope_dims or rope_dimensions(config, plan.head_dim))
        writer.add_vocab_size(int(config.vocab_size))
    if family.rotary:
        add_rope_keys(writer, config)
    if family.keys is not None:
        family.keys(writer, config)
    scalar_keys(writer, artifact)
    writer.add_file_type(FILE_TYPES[gguf_type])
    if gguf_type not in ("f32", "f16", "bf16"):
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokenizer_writer(writer)
    if gguf_type in K_QUANTS:  # llama.cpp's own quantizer and its choice of each tensor's type
        typed, _ = typer(tensors, gguf_type, arch=plan.arch, head_count=plan.head_count,
                         head_count_kv=plan.head_count_kv)
    else:
        typed = lambda tensor_name, data: _typed(tensor_name, data, gguf_type)  # noqa: E731
    types = {}
    for tensor_name, data in tensors.items():
        array, raw = typed(tensor_name, data.numpy())
        writer.add_tensor(tensor_name, array, raw_dtype=raw)
        types[tensor_name] = raw.name
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return types


# ---------------------------------------------------------------- the files an export writes


def llama_cpp_version() -> tuple[str | None, str]:
    """The llama.cpp runtime headprune runs GGUF files in, or None and why it cannot be used."""
    from headprune.exporter.llama_cpp.binding import runtime_version

    return runtime_version()


def not_run(reason: str, gguf_type: str) -> Any:
    from headprune.exporter.export_record import RuntimeCheck

    return RuntimeCheck("", False, reason, gguf_type)


@dataclass
class GgufFiles:
    """A GGUF export's files: the one written, the float32 one the runtime gate runs, and what they hold; the
    original model written in the same type (in scratch): its size, and for a lossy type the quantized check's runs."""

    path: Path
    f32_path: Path
    plan: GgufPlan
    tensors: dict[str, torch.Tensor]
    tokenizer: str
    chat_template: bool
    read_back: int
    read_back_diff: float
    notes: tuple[str, ...]
    types: dict[str, str]  # tensor name -> its GGML type in the written file
    original_path: Path | None = None  # the original (every head, the stock architecture) in the same type
    stored: dict[str, np.ndarray] | None = None  # a lossy file's tensors as read back, de-quantised


def write_files(lm: Any, artifact: torch.nn.Module, arch: str, plans: Any, folder: Path, scratch: Path,
                gguf_type: str, *, with_original: bool = True) -> GgufFiles:
    """Write ``model.gguf`` in ``gguf_type`` (and a float32 copy in ``scratch`` for the runtime check when the
    type is another), then read every tensor back; ``with_original``: the original model too, in ``scratch``, in the
    same type (the file an export is measured against). ``plans``: a sliced artifact's layer plans (None: every head
    in shape, as a dense artifact or the original keeps them).

    Raises:
        VerificationError: a float32 file does not hold exactly the artifact's tensors.
    """
    from headprune.errors import VerificationError

    plan = gguf_plan(lm, arch, plans)
    tensors = gguf_tensors(artifact, plan)
    write_tokenizer, description, chat = tokenizer_writer(lm, int(artifact.config.vocab_size), scratch)
    name = f"{Path(str(lm.name)).name} (headprune)"
    path = folder / file_name(gguf_type)
    types = write_gguf(path, artifact, plan, tensors, write_tokenizer, name=name, gguf_type=gguf_type)
    stored: dict[str, np.ndarray] = {}  # what a lossy file holds, de-quantised: its logit gate's reference
    count, diff = read_back(path, tensors, stored if gguf_type != "f32" else None)
    f32_path, exact, original = path, diff, None
    if gguf_type != "f32":
        f32_path = scratch / "verify-f32.gguf"
        write_gguf(f32_path, artifact, plan, tensors, write_tokenizer, name=name, gguf_type="f32")
        _, exact = read_back(f32_path, tensors)
    if with_original:
        # The original as a user would otherwise deploy it: every head, the stock architecture, the same type (its
        # bytes are the export's measure; a lossy one also has the task run on it).
        stock = gguf_plan(lm, "llama" if arch == "deci" else arch, None)
        original = scratch / f"original-{gguf_type.upper()}.gguf"
        write_gguf(original, lm.model, stock, gguf_tensors(lm.model, stock), write_tokenizer,
                   name=f"{Path(str(lm.name)).name}", gguf_type=gguf_type)
    if exact != 0.0:
        raise VerificationError(f"the float32 GGUF file does not hold the pruned tensors exactly (largest "
                                f"difference {exact:.3g}); nothing was written")
    notes = []
    window = getattr(artifact.config, "sliding_window", None)
    family = family_of(artifact.config)
    # (Qwen's configs carry an unused window; Gemma's and GPT-OSS's are written, and llama.cpp applies them)
    if window and getattr(artifact.config, "use_sliding_window", True) and not family.sliding_window:
        notes.append(f"the checkpoint declares a {window}-token sliding window, which llama.cpp's {arch} graph does "
                     "not apply: the two agree on contexts up to that length")
    if family.encoder:
        notes.append(ENCODER_NOTE)
    if family.tolerance is not None:
        notes.append(GELU_TABLE_NOTE.format(tolerance=family.tolerance) if family.encoder else GELU_NOTE)
    if not family.gated and getattr(artifact.config, "hidden_act", None) == "gelu":  # Pythia
        notes.append(ERF_GELU_NOTE)
    rope = rope_parameters(artifact.config)
    if rope.get("rope_type") == "dynamic" and not rope.get("alpha"):  # (HunYuan's fixed alpha: a static base)
        trained = rope.get("original_max_position_embeddings") or artifact.config.max_position_embeddings
        notes.append(f"the checkpoint's dynamic NTK RoPE rescales beyond {trained} tokens in transformers, which "
                     "llama.cpp does not do: the two agree on contexts up to that length")
    notes += rope_notes(artifact.config)
    if plans is not None and arch != "deci":
        notes.append(f"sliced: llama.cpp's {arch} graph reads each layer's head counts")
    if arch == "deci":
        notes.append("sliced: llama.cpp's deci architecture (per-layer head counts); stock llama-architecture "
                     "tools that assume equal layers do not apply")
    return GgufFiles(path, f32_path, plan, tensors, description, chat, count, diff, tuple(notes), types, original,
                     stored or None)

