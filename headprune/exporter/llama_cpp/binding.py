"""llama.cpp itself, without a compiler, through ctypes: llama-cpp-python where it is installed (the runtime its
users already have, with its own declarations), else the prebuilt ``xllamacpp`` wheel.

PyPI ships llama-cpp-python only as source (15 to 30 minutes of compiling on a 2-core machine), while ``xllamacpp``
(Xorbits, MIT) is a prebuilt abi3 wheel whose shared library exports llama.cpp's C functions. Its stated API is only
its ``Server``, so the C structs and signatures headprune passes are declared per release, GENERATED from that
release's own ``llama.h`` (``headprune/exporter/llama_cpp/decls``, by ``scripts/llama_h_to_ctypes.py``; never typed
by hand) and picked by the installed version before anything of the library is loaded: another release is refused
(one line naming the supported ones, exit 2), never called with a layout that may not match.

The declarations are checked against the running build (:func:`problems`, once per load; :func:`read_back`, on
every context): every default ``llama_*_default_params`` returns must read as llama.cpp's source sets it (for
llama-cpp-python: the defaults headprune relies on), a struct-returning function must write exactly the declared
size, and every field headprune sets must reach llama.cpp (read back through its getters and its own log of the
context it made). Two fields swapped in a declaration are caught unless they hold the same value throughout, in
which case llama.cpp receives exactly what it would have.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import platform
import re
from dataclasses import dataclass, field
from importlib import metadata, util
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any


from headprune.core.interrupts import deferring
from headprune.errors import InternalCheckError, MissingExtraError
from headprune.exporter.llama_cpp.decls import SUPPORTED

RUNTIMES = ("llama-cpp-python", "xllamacpp")  # in the order they are preferred
# Defaults the gate's numbers depend on (rope and YaRN from the file, logits of a causal decoder, one sequence),
# checked in every runtime; xllamacpp's are checked field by field against its build's source.
RELIED_ON = ("n_seq_max", "rope_scaling_type", "pooling_type", "attention_type", "rope_freq_base", "rope_freq_scale",
             "yarn_ext_factor", "yarn_attn_factor", "yarn_beta_fast", "yarn_beta_slow", "yarn_orig_ctx", "embeddings",
             "cb_eval", "abort_callback")


@dataclass
class Binding:
    """One llama.cpp runtime: its functions (attributes of ``lib``), its declarations and what is checked."""

    runtime: str  # "llama.cpp b11549 (xllamacpp 2026.10.11549)", "llama.cpp (llama-cpp-python 0.3.36)"
    lib: Any
    decls: Any  # llama_context_params, llama_model_params, llama_batch, CONSTANTS
    defaults: dict[str, dict[str, object]]  # struct name: field: llama.cpp's default
    cdll: ctypes.CDLL | None = None  # the raw library, for the struct-size probe
    log: list[list] = field(default_factory=list)  # [level, text] of llama.cpp's log since the last clear
    keep: list = field(default_factory=list)  # the log callback, alive while the library may call it


def _newest() -> ModuleType:
    return importlib.import_module(f"headprune.exporter.llama_cpp.decls.{SUPPORTED[max(SUPPORTED, key=_key)]}")


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _xllamacpp(decls: ModuleType | None = None) -> Binding:
    """xllamacpp's library with the declarations of its release (``decls`` replaces them, for tests).

    Raises:
        MissingExtraError: a release headprune has no declarations for (nothing of it was loaded).
    """
    version = metadata.version("xllamacpp")
    if decls is None:
        if version not in SUPPORTED:
            raise MissingExtraError(
                f"xllamacpp {version} is installed; headprune runs llama.cpp through xllamacpp "
                f"{', '.join(sorted(SUPPORTED, key=_key))} only: pip install 'headprune[gguf]'")
        decls = importlib.import_module(f"headprune.exporter.llama_cpp.decls.{SUPPORTED[version]}")
    folder = Path(util.find_spec("xllamacpp").origin).parent  # type: ignore[union-attr, arg-type]
    found = sorted(folder.glob("xllamacpp*.so")) + sorted(folder.glob("xllamacpp*.pyd"))
    if not found:
        raise MissingExtraError(f"no xllamacpp shared library beside {folder}: pip install 'headprune[gguf]'")
    cdll = ctypes.CDLL(str(found[0]))
    lib = SimpleNamespace()
    for name, (result, arguments) in decls.FUNCTIONS.items():
        try:
            function = getattr(cdll, name)
        except AttributeError:
            raise InternalCheckError(f"llama.cpp in xllamacpp {version} exports no {name}") from None
        function.restype, function.argtypes = result, arguments
        setattr(lib, name, deferring(function))  # llama.cpp may log (call back into Python) from any function
    return Binding(f"llama.cpp {decls.BUILD} (xllamacpp {version})", lib, SimpleNamespace(
        llama_context_params=decls.llama_context_params, llama_model_params=decls.llama_model_params,
        llama_batch=decls.llama_batch, log_callback=decls.ggml_log_callback,
        abort_callback=decls.ggml_abort_callback, progress_callback=decls.llama_progress_callback,
        CONSTANTS=decls.CONSTANTS), decls.DEFAULTS, cdll)


def _llama_cpp_python() -> Binding:
    """llama-cpp-python's own ctypes module (its declarations match the build it ships)."""
    module = importlib.import_module("llama_cpp.llama_cpp")
    newest = _newest()
    # Its module binds llama.cpp's llama_* functions; the ggml quantizers (K-quants) are xllamacpp's only.
    missing = [name for name in newest.FUNCTIONS if name.startswith("llama_") and not hasattr(module, name)]
    if missing:
        raise MissingExtraError(f"llama-cpp-python {metadata.version('llama-cpp-python')} has no {missing[0]}; "
                                "headprune needs a newer one (pip install -U llama-cpp-python)")
    decls = SimpleNamespace(llama_context_params=module.llama_context_params,
                            llama_model_params=module.llama_model_params, llama_batch=module.llama_batch,
                            log_callback=module.llama_log_callback, abort_callback=module.ggml_abort_callback,
                            progress_callback=module.llama_progress_callback, CONSTANTS=newest.CONSTANTS)
    defaults = {"llama_context_params": {k: newest.DEFAULTS["llama_context_params"][k] for k in RELIED_ON}}
    lib = SimpleNamespace(**{name: deferring(getattr(module, name)) for name in newest.FUNCTIONS
                             if hasattr(module, name)})  # llama.cpp may log (call back into Python) from any
    return Binding(f"llama.cpp (llama-cpp-python {metadata.version('llama-cpp-python')})", lib, decls, defaults)


def installed() -> list[str]:
    """The llama.cpp runtimes installed here, preferred first."""
    modules = {"llama-cpp-python": "llama_cpp", "xllamacpp": "xllamacpp"}
    out = []
    for name in RUNTIMES:
        try:
            if util.find_spec(modules[name]) is not None:
                out.append(name)
        except (ImportError, ValueError):
            pass
    return out


def _plain(value: object) -> object:
    """A field's value as the defaults are written: a pointer or callback as None when null."""
    if isinstance(value, (ctypes._Pointer, ctypes._CFuncPtr)):  # type: ignore[attr-defined]
        return None if not value else "set"
    return value


def _sret_extent(function: Any, size: int) -> int:
    """How many bytes a struct-returning function writes: on x86-64 (System V and Windows) a struct larger than
    16 bytes is returned through a hidden pointer in the first argument register, so the function is called with
    a guard-filled buffer there and the last byte it changed is found. Only called once the release is known."""
    guard = (ctypes.c_ubyte * (size + 64))(*([0xA5] * (size + 64)))
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ctypes.cast(function, ctypes.c_void_p).value)(ctypes.addressof(guard))
    written = [i for i, byte in enumerate(bytes(guard)) if byte != 0xA5]
    return (max(written) + 1) if written else 0


def problems(binding: Binding) -> list[str]:
    """What does not match between the declarations and the loaded build; empty when they match."""
    found = []
    for struct, want in binding.defaults.items():
        got = getattr(binding.lib, struct.replace("_params", "_default_params"))()
        for name, value in want.items():
            read = _plain(getattr(got, name, "missing"))
            if read != value:
                found.append(f"{struct}.{name} reads {read!r}, llama.cpp's default is {value!r}")
    if binding.cdll is not None and platform.machine().lower() in ("x86_64", "amd64"):
        for struct in ("llama_context_params", "llama_model_params"):
            size = ctypes.sizeof(getattr(binding.decls, struct))
            extent = _sret_extent(getattr(binding.cdll, struct.replace("_params", "_default_params")), size)
            if not size - 8 < extent <= size:
                found.append(f"{struct.replace('_params', '_default_params')} writes {extent} bytes; {struct} "
                             f"declares {size}")
    for embd, present in ((0, "token"), (8, "embd")):
        batch = binding.lib.llama_batch_init(4, embd, 1)
        try:
            pointers = {name: bool(getattr(batch, name)) for name in ("token", "embd", "pos", "n_seq_id", "seq_id",
                                                                      "logits")}
            want = {name: name != ("embd" if present == "token" else "token") for name in pointers}
            if pointers != want or batch.n_tokens != 0:
                found.append(f"llama_batch_init(4, {embd}, 1) gives n_tokens {batch.n_tokens} and non-null "
                             f"{pointers}, expected {want}")
        finally:
            binding.lib.llama_batch_free(batch)
    return found


_LOADED: dict[str, Binding] = {}


def library(runtime: str | None = None) -> Binding:
    """The first installed llama.cpp runtime (or ``runtime``), loaded and checked, once per process.

    Raises:
        MissingExtraError: none installed, or one headprune has no declarations for (exit 2, naming the supported).
        InternalCheckError: the declarations do not match the loaded build (nothing was called with them).
    """
    names = [runtime] if runtime else installed()
    if not names:
        raise MissingExtraError("running GGUF files needs llama.cpp (xllamacpp), not installed: "
                                "pip install 'headprune[gguf]'")
    if names[0] not in _LOADED:
        _LOADED[names[0]] = checked(_llama_cpp_python() if names[0] == "llama-cpp-python" else _xllamacpp())
    return _LOADED[names[0]]


def checked(binding: Binding) -> Binding:
    """``binding`` once :func:`problems` finds nothing, its log kept and its backend started.

    Raises:
        InternalCheckError: the declarations do not match the loaded build.
    """
    found = problems(binding)
    if found:
        raise InternalCheckError(f"headprune's llama.cpp declarations do not match {binding.runtime}: "
                                 + "; ".join(found))

    def keep(level: int, text: bytes, _: object) -> None:
        text = text.decode("utf-8", "replace")
        if level == binding.decls.CONSTANTS["GGML_LOG_LEVEL_CONT"] and binding.log:
            binding.log[-1][1] += text
        else:
            binding.log.append([level, text])

    binding.keep = [binding.decls.log_callback(keep)]
    binding.lib.llama_backend_init()
    return binding


def runtime_version() -> tuple[str | None, str]:
    """``(the runtime, "")`` when llama.cpp can be used, ``(None, why)`` when none is installed.

    Raises:
        MissingExtraError: an installed runtime headprune cannot use (an unsupported xllamacpp release).
        InternalCheckError: the declarations do not match the build.
    """
    if not installed():
        return None, "llama.cpp is not installed (pip install 'headprune[gguf]' brings xllamacpp)"
    return library().runtime, ""


def read_back(binding: Binding, ctx: int, params: Any, *, cache: bool = True) -> list[str]:
    """The fields set in ``params`` that did not reach llama.cpp's context ``ctx``: its getters and the log of
    the context it made (flash attention, key and value cache types, one key/value buffer for every sequence;
    ``cache`` False: a model without a key/value cache, an encoder, whose log names no cache types)."""
    lib, constants, found = binding.lib, binding.decls.CONSTANTS, []
    got = {"n_ctx": lib.llama_n_ctx(ctx), "n_batch": lib.llama_n_batch(ctx), "n_ubatch": lib.llama_n_ubatch(ctx),
           "n_threads": lib.llama_n_threads(ctx), "n_threads_batch": lib.llama_n_threads_batch(ctx),
           "n_seq_max": lib.llama_n_seq_max(ctx), "pooling_type": lib.llama_pooling_type(ctx)}
    for name, value in got.items():
        want = params.n_ctx if name == "n_ctx" else getattr(params, name)
        if name == "pooling_type" and want == constants["LLAMA_POOLING_TYPE_UNSPECIFIED"]:
            continue  # the file's own (a decoder's: none)
        if not (want <= value < want + 256 if name == "n_ctx" else value == want):  # n_ctx: padded to 256
            found.append(f"{name} {want} was set, llama.cpp uses {value}")
    log = "".join(text for _, text in binding.log)
    said = {"flash_attn_type": ("LLAMA_FLASH_ATTN_TYPE_", re.findall(r"flash_attn\s*=\s*(\w+)", log)),
            "type_k": ("GGML_TYPE_", re.findall(r"\bK \((\w+)\)", log)),
            "type_v": ("GGML_TYPE_", re.findall(r"\bV \((\w+)\)", log)),
            "kv_unified": ("", re.findall(r"kv_unified\s*=\s*(\w+)", log))}
    for name, (prefix, words) in said.items():
        if not cache and name in ("type_k", "type_v"):
            continue
        value = getattr(params, name)
        want = str(value).lower() if isinstance(value, bool) else next(
            k[len(prefix):].lower() for k, v in constants.items() if k.startswith(prefix) and v == value)
        if words[-1:] != [want]:
            found.append(f"{name} {want} was set, llama.cpp's log says {words[-1] if words else 'nothing'}")
    return found


def physical_cores() -> int:
    """The physical cores among the CPUs this process may run on, as llama.cpp's own default counts them (one per
    set of hardware threads that share a core, ``topology/thread_siblings_list``); half the CPUs where that cannot
    be read (two hardware threads a core)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
        cores = {Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text().strip()
                 for cpu in cpus}
        return max(1, len(cores))
    except (AttributeError, OSError):
        return max(1, (os.cpu_count() or 2) // 2)
