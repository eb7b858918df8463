"""Models in: resolve what the user typed to a local folder, load it, and pair it with its adapter.

``MODEL`` may be a local Hugging Face folder, a ``.gguf`` file (converted once into a cached safetensors
folder), a Hub id found in the local Hugging Face cache, or the built-in default ``smollm2-135m``. ``load_model``
loads it for evaluation; ``load`` (``headprune.load``) loads an export or any model folder in its weights' own dtype.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import pickle
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from huggingface_hub.errors import StrictDataclassError  # transformers' configs check their fields' types
from safetensors import SafetensorError
from transformers import PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

from headprune.core.checkpoint_files import pickle_protocols, refused
from headprune.core.compat import forget_quantized_loading
from headprune.core.hashing import hash_weights
from headprune.core.io import user_path
from headprune.errors import ModelNotFoundError, SearchSettingsError, UnsupportedModelError
from headprune.heads import HeadGrid
from headprune.loading.adapters import Adapter, adapter_for, supported_model_types
from headprune.loading.credentials import credentials_found, load_tokenizer, strip_loaded
from headprune.loading.gguf_convert import convert_gguf
from headprune.loading.gguf_source import BUILTIN_MODELS, builtin_gguf
from headprune.loading.model_checks import (check_config_file, check_loaded, dropped_tensors, shape_mismatches,
                                            sliced_record)
from headprune.loading.model_class import ModelClass, loading_class, task_head_of
from headprune.loading.quantized import Quantization, check_dequantized, read_quantization

log = logging.getLogger("headprune")

DEFAULT_MODEL = "smollm2-135m"
_BUILTIN_HUB_IDS = {"smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct"}


def builtin_hub_id(spec: str) -> str | None:
    """The Hub id a built-in model was converted from (for model cards), or a Hub-id-looking spec itself."""
    if spec in _BUILTIN_HUB_IDS:
        return _BUILTIN_HUB_IDS[spec]
    return spec if _looks_like_hub_id(spec) and not Path(spec).exists() else None


def cache_dir() -> Path:
    """Where converted models live: ``$HEADPRUNE_CACHE`` or ``~/.cache/headprune``."""
    return Path(os.environ.get("HEADPRUNE_CACHE", Path.home() / ".cache" / "headprune"))


@dataclass
class LoadedModel:
    """A model ready for evaluation, with everything headprune needs to know about it."""

    name: str
    folder: Path
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    adapter: Adapter
    grid: HeadGrid
    model_class: ModelClass | None = None  # None for runtimes standing in for a model (ONNX)
    unused_tensors: tuple[str, ...] = ()  # checkpoint tensors the class did not load (never exported)
    quantization: Quantization | None = None  # a quantized checkpoint's quantization, read dequantized
    dropped_tensors: tuple[str, ...] = ()  # checkpoint tensors the class drops by design (multi-token prediction)
    _weight_hash: str | None = field(default=None, repr=False)

    @property
    def is_encoder(self) -> bool:
        return self.adapter.is_encoder

    @property
    def task_head(self) -> str:
        """The task head the model carries: ``causal-lm``, ``masked-lm``, ``sequence-classification``, ..."""
        return self.model_class.task_head if self.model_class is not None else (
            "base" if self.is_encoder else "causal-lm")

    @property
    def dtype(self) -> torch.dtype:
        """The weights' dtype (float32 for a runtime standing in for a model)."""
        dtype = getattr(self.model, "dtype", None)
        return dtype if isinstance(dtype, torch.dtype) else torch.float32

    @property
    def device(self) -> torch.device:
        """Where inputs go: the device of the input embeddings (the first layer's, under a device map); an
        ONNX Runtime session stands in for a model on the CPU."""
        embeddings = getattr(self.model, "get_input_embeddings", None)
        if embeddings is None:
            return torch.device("cpu")
        module = embeddings()
        execution = getattr(getattr(module, "_hf_hook", None), "execution_device", None)  # dispatched (offloaded)
        if execution is not None:
            return torch.device("cuda", execution) if isinstance(execution, int) else torch.device(execution)
        return module.weight.device

    @property
    def weight_hash(self) -> str:
        """sha256 over the weight files (name and bytes), computed once."""
        if self._weight_hash is None:
            self._weight_hash = hash_weights(self.folder)
        return self._weight_hash


def resolve_model(spec: str, *, trust_remote_code: bool = False, revision: str | None = None) -> Path:
    """Turn a model specification into a local Hugging Face folder (converting GGUF on first use; a Hub id
    not in the cache downloads only the files a load reads, at ``revision``: see
    :mod:`headprune.loading.model_download`).

    Raises:
        ModelNotFoundError: nothing loadable is there (with what was tried).
        SettingsError: a revision for a model that is no Hub id.
    """
    if revision is not None and not (_looks_like_hub_id(spec) and not user_path(spec).exists()):
        from headprune.errors import SettingsError

        raise SettingsError(f"revision applies to a Hub id (OWNER/NAME); {spec} is a local folder, file or built-in "
                            "model", settings=("revision",))
    if spec in BUILTIN_MODELS:
        return convert_gguf(builtin_gguf(spec), cache_dir())
    path = user_path(spec)
    if path.is_file() and path.suffix == ".gguf":
        return convert_gguf(path, cache_dir())
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{spec}: not a Hugging Face model folder (no config.json)")
        return path
    if path.exists():
        raise ModelNotFoundError(f"{spec}: not a model (expected a Hugging Face folder or a .gguf file)")
    if _looks_like_hub_id(spec):
        from headprune.loading.model_download import from_hub

        return from_hub(spec, trust_remote_code=trust_remote_code, revision=revision)
    raise ModelNotFoundError(
        f"model {spec!r} not found: give a local folder, a .gguf file, a Hub id (OWNER/NAME), "
        f"or one of the built-ins ({', '.join(BUILTIN_MODELS)})"
    )


def load_config(folder: Path) -> PretrainedConfig:
    """Read config.json, with a clear error when it is not a transformer config or gives a size no model can
    have (``headprune.loading.model_checks``: transformers would divide by a head count of 0 before saying anything)."""
    from transformers import AutoConfig

    check_config_file(folder)
    try:
        return AutoConfig.from_pretrained(folder)
    except (ValueError, KeyError, OSError, TypeError, AttributeError, ArithmeticError, StrictDataclassError) as error:
        why = " ".join(line.strip() for line in str(error).splitlines())[:200]  # a field's error spans lines
        raise UnsupportedModelError(f"{folder}: config.json does not describe a supported transformer ({why}); "
                                    f"supported model types: {', '.join(supported_model_types())}") from error


def quiet_transformers() -> None:
    """headprune shows its own progress: silence transformers' bars for loading and saving weights."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()  # headprune reports what loading left out itself (see load_model)


def load_model(spec: str, *, dtype: str | torch.dtype | None = "auto", device: str | torch.device | None = "auto",
               trust_remote_code: bool = False, device_map: str | None = None,
               max_memory: str | dict | None = None, revision: str | None = None) -> LoadedModel:
    """Load a model with its own task head, and its tokenizer, for evaluation (eval mode).

    The class is the one the checkpoint's ``architectures`` names (see :mod:`headprune.loading.model_class`), so no
    weight is dropped; a sliced headprune export is rebuilt with its recorded shapes. Where the checkpoint does
    not name a class, or the class leaves checkpoint tensors out, a warning on the ``headprune`` logger says
    which class was used and what was left out, before anything runs.

    Args:
        spec: local folder, ``.gguf`` file, Hub id (cached, or downloaded: only what a load reads), or
            ``smollm2-135m``.
        dtype: ``auto`` (bfloat16 on a GPU, float32 on a CPU), ``checkpoint`` (the checkpoint's own),
            ``float32``, ``bfloat16``, ``float16``, or a torch dtype.
        device: ``auto`` (the GPU when there is one), ``cpu``, ``cuda``, ``cuda:N``, ``mps``, or a torch device.
        trust_remote_code: allow a checkpoint whose class only its own code defines.
        device_map: ``auto``, ``balanced``, ``balanced_low_0`` or ``sequential``: spread the layers over the
            visible GPUs (then the CPU, then disk) the way transformers and accelerate do (big-model dispatch),
            instead of ``device``; ``max_memory`` (``"0=20GiB,1=20GiB,cpu=64GiB"`` or a dict) caps each.
        revision: for a Hub id, the branch, tag or commit to read (default main); the commit read is the
            snapshot folder's name (``model_download.commit_of(lm.folder)``).

    Raises:
        ModelNotFoundError, UnsupportedModelError, SearchSettingsError.
    """
    from headprune.core.devices import check_device_map, parse_max_memory, resolve_device, resolve_dtype

    device_map, max_memory = check_device_map(device_map), parse_max_memory(max_memory)
    if max_memory is not None and device_map is None:
        raise SearchSettingsError("max_memory needs device_map (e.g. auto)", settings=("max_memory", "device_map"))
    target = resolve_device(device if device_map is None else "auto")
    quiet_transformers()
    folder = resolve_model(spec, trust_remote_code=trust_remote_code, revision=revision)
    config = load_config(folder)
    dtype = checkpoint_dtype(config) if dtype == "checkpoint" else resolve_dtype(dtype, target)
    adapter = adapter_for(config)
    adapter.check_config(config, f"{folder}: config.json")
    sliced, quantization = sliced_record(config, folder), read_quantization(folder)
    chosen, from_pretrained = loading_class(config, folder, sliced, encoder=adapter.is_encoder,
                                            trust_remote_code=trust_remote_code)
    placement = {} if device_map is None else {
        "device_map": device_map, "max_memory": max_memory, "offload_folder": _offload_folder()}
    if quantization is not None:  # read dequantized on every device (a CPU would anyway): search and surgery cut plain
        placement.update(quantization.loading_kwargs())  # weights
    credentials = credentials_found(folder, spec)
    try:
        with pickle_protocols() as protocols, warnings.catch_warnings():  # torch's warning about one goes into the
            warnings.filterwarnings("ignore", "You passed `quantization_config`")  # refusal; ours asks to dequantize
            model, info = from_pretrained(folder, dtype=dtype, output_loading_info=True, **placement)
    except OSError as error:
        raise ModelNotFoundError(f"{spec}: cannot load model files ({error})") from error
    except pickle.UnpicklingError as error:  # a pytorch_model.bin that transformers' weights-only loading refuses
        raise refused(folder, error, protocols) from error
    except (SafetensorError, ValueError) as error:  # a corrupt or truncated weight file, shapes that disagree
        raise UnsupportedModelError(f"{spec}: cannot load the weights ({str(error).splitlines()[0][:200]})") from error
    except RuntimeError as error:  # transformers' size-mismatch error points at a report it does not show here
        if "mismatch" not in str(error):
            raise
        raise UnsupportedModelError(f"{spec}: the weights' shapes disagree with config.json "
                                    f"({shape_mismatches(folder, chosen.name, config) or 'size mismatch'})") from None
    except (TypeError, AttributeError, KeyError, IndexError, ArithmeticError) as error:  # a config value of a wrong
        raise UnsupportedModelError(f"{spec}: cannot build the model config.json describes ({type(error).__name__}: "
                                    f"{str(error).splitlines()[0][:200] if str(error) else ''})") from None  # kind
    strip_loaded(model)
    tokenizer = _load_tokenizer(folder, spec, credentials, trust_remote_code=trust_remote_code)
    if device_map is None:
        model.to(target)
    else:
        log.info("%s: layers placed by device_map=%s: %s", spec, device_map, _placement(model))
    model.eval()
    unused = tuple(sorted(info.get("unexpected_keys", ())))
    check_loaded(spec, chosen, unused, tuple(sorted(info.get("missing_keys", ()))), adapter=adapter,
                 sliced=sliced is not None)
    dropped = dropped_tensors(model, folder)
    if quantization is not None:  # the weights read (those of what the class drops are written through as stored)
        check_dequantized(model, quantization, spec)
        forget_quantized_loading(model)
        quantization = replace(quantization, read_as=str(model.dtype).removeprefix("torch."),
                               weights=tuple(name for name in quantization.weights if name not in set(dropped)))
        log.info("%s: %s", spec, quantization.line())
    return LoadedModel(spec, folder, model, tokenizer, adapter, adapter.grid(model.config), chosen, unused,
                       quantization, dropped)


def _load_tokenizer(folder: Path, spec: str, credentials: dict, *, trust_remote_code: bool) -> PreTrainedTokenizerBase:
    """The model's tokenizer (without the credentials its files hold).

    Raises:
        UnsupportedModelError: the tokenizer files are missing or broken (said as such: the weights loaded).
    """
    try:
        return load_tokenizer(folder, credentials, trust_remote_code=trust_remote_code)
    except (OSError, ValueError, TypeError, AttributeError, KeyError, IndexError, RuntimeError) as error:
        why = str(error).splitlines()[0][:200] if str(error).strip() else type(error).__name__
        raise UnsupportedModelError(f"{spec}: cannot load the tokenizer ({why})") from None


def load(folder: str | Path, *, dtype: str | torch.dtype = "checkpoint", device: str | torch.device = "auto"
         ) -> LoadedModel:
    """Load a headprune export (sliced or dense) or any supported model folder, with its own task head
    (``headprune.load``: :func:`load_model` with the weights in the dtype they were saved in).

    Sliced checkpoints are rebuilt with the recorded per-layer head counts (the same code the exported
    ``modeling_headprune.py`` runs under ``trust_remote_code``); stock from_pretrained cannot load them.

    Raises:
        ModelNotFoundError, UnsupportedModelError.
    """
    return load_model(str(folder), dtype=dtype, device=device)


def _offload_folder() -> str:
    """A private folder for the weights a device map puts on disk (removed when the process ends)."""
    root = cache_dir() / "offload"
    root.mkdir(parents=True, exist_ok=True)
    folder = tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root)
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _placement(model: PreTrainedModel) -> str:
    """``cuda:0 (12 modules), cuda:1 (13 modules)``: where a dispatched model's modules went."""
    counts: dict[str, int] = {}
    for where in getattr(model, "hf_device_map", {}).values():
        name = f"cuda:{where}" if isinstance(where, int) else str(where)
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{name} ({count} modules)" for name, count in counts.items())


def checkpoint_dtype(config: PretrainedConfig) -> torch.dtype:
    """The dtype a checkpoint's config declares (float32 when it declares none)."""
    declared = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(declared, str):
        declared = getattr(torch, declared.removeprefix("torch."), None)
    return declared if isinstance(declared, torch.dtype) else torch.float32


def wrap_model(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, *, name: str = "in-memory", folder: Path | None = None
) -> LoadedModel:
    """Pair an already-built model (e.g. a tiny test model) with its adapter."""
    adapter = adapter_for(model.config)
    model.eval()
    class_name = type(model).__name__
    chosen = ModelClass(class_name, *task_head_of(model.config.model_type, class_name), True)
    loaded = LoadedModel(name, folder or Path("."), model, tokenizer, adapter, adapter.grid(model.config), chosen)
    if folder is None:
        loaded._weight_hash = _hash_state_dict(model)
    return loaded


def _hash_state_dict(model: PreTrainedModel) -> str:
    digest = hashlib.sha256()
    for key, tensor in sorted(model.state_dict().items()):
        digest.update(key.encode())
        # Raw bytes (numpy has no bfloat16): the same digest as the tensor's own bytes in every dtype.
        digest.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return "sha256:" + digest.hexdigest()


def _looks_like_hub_id(spec: str) -> bool:
    parts = spec.split("/")
    return len(parts) == 2 and all(parts) and not spec.startswith((".", "/", "~"))
