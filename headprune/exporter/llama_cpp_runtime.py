"""llama.cpp itself, without a compiler: a thin ctypes binding to the C API inside the prebuilt ``xllamacpp`` wheel.

Why this and not llama-cpp-python: PyPI ships llama-cpp-python only as source (15 to 30 minutes of compiling on
a 2-core machine), while ``xllamacpp`` (Xorbits, MIT) is a prebuilt abi3 wheel whose shared library exports
llama.cpp's C functions. headprune calls about twenty of them directly, so the numbers the GGUF gate compares are
llama.cpp's own (its loader, graph and kernels), not a re-implementation. llama-cpp-python is not used at all:
one runtime, one code path, tested in CI.

C structs passed by value must match the build byte for byte, so the binding is pinned to one build
(:data:`PINNED`) and checks the layouts against that build every time it loads (:func:`layout_problems`): the
defaults llama.cpp's own ``llama_context_default_params`` / ``llama_batch_init`` return must sit at the offsets
declared here, and (on x86-64) the bytes the library writes must end where the declared struct ends. A field this
binding does not set is declared as opaque bytes and keeps llama.cpp's default.
"""

from __future__ import annotations

import ctypes
import os
import platform
from ctypes import c_bool, c_float, c_int32, c_uint32, c_void_p
from importlib import metadata, util
from pathlib import Path

import numpy as np

PINNED = "2026.10.11549"  # xllamacpp release = llama.cpp build b11549
BUILD = "b11549"


class ModelParams(ctypes.Structure):
    """``struct llama_model_params`` (80 bytes in b11549): passed as llama.cpp's defaults, never edited."""

    _fields_ = [("_opaque", ctypes.c_uint64 * 10)]


class ContextParams(ctypes.Structure):
    """``struct llama_context_params`` of b11549 (168 bytes). Named fields are the ones whose offsets
    :func:`layout_problems` checks through their defaults; the rest are opaque and keep llama.cpp's defaults."""

    _fields_ = [
        ("n_ctx", c_uint32), ("n_batch", c_uint32), ("n_ubatch", c_uint32), ("n_seq_max", c_uint32),
        ("_opaque_16", c_uint32 * 3),  # n_rs_seq, n_outputs_max, one more (0, 0, 1)
        ("n_threads", c_int32), ("n_threads_batch", c_int32),
        ("ctx_type", c_int32), ("rope_scaling_type", c_int32), ("pooling_type", c_int32),
        ("attention_type", c_int32), ("flash_attn_type", c_int32),
        ("rope_freq_base", c_float), ("rope_freq_scale", c_float), ("yarn_ext_factor", c_float),
        ("yarn_attn_factor", c_float), ("yarn_beta_fast", c_float), ("yarn_beta_slow", c_float),
        ("yarn_orig_ctx", c_uint32), ("defrag_thold", c_float),
        ("cb_eval", c_void_p), ("cb_eval_user_data", c_void_p),
        ("type_k", c_int32), ("type_v", c_int32),
        ("_opaque_112", ctypes.c_ubyte * 24),  # the abort callback, its data and one more field (all 0)
        ("embeddings", c_bool), ("offload_kqv", c_bool), ("no_perf", c_bool), ("op_offload", c_bool),
        ("swa_full", c_bool), ("kv_unified", c_bool),
        ("samplers", c_void_p), ("n_samplers", ctypes.c_size_t),
        ("_opaque_160", ctypes.c_uint64),
    ]


class Batch(ctypes.Structure):
    """``struct llama_batch`` (56 bytes)."""

    _fields_ = [("n_tokens", c_int32), ("token", ctypes.POINTER(c_int32)), ("embd", ctypes.POINTER(c_float)),
                ("pos", ctypes.POINTER(c_int32)), ("n_seq_id", ctypes.POINTER(c_int32)),
                ("seq_id", ctypes.POINTER(ctypes.POINTER(c_int32))), ("logits", ctypes.POINTER(ctypes.c_int8))]


# llama_context_default_params() in llama.cpp's src/llama-context.cpp: GGML_DEFAULT_N_THREADS = 4, the
# UNSPECIFIED/AUTO enums = -1, YaRN factors -1, GGML_TYPE_F16 = 1 for the key/value cache.
CONTEXT_DEFAULTS = {"n_ctx": 512, "n_batch": 2048, "n_ubatch": 512, "n_seq_max": 1, "n_threads": 4,
                    "n_threads_batch": 4, "ctx_type": 0, "rope_scaling_type": -1, "pooling_type": -1,
                    "attention_type": -1, "flash_attn_type": -1, "rope_freq_base": 0.0, "rope_freq_scale": 0.0,
                    "yarn_ext_factor": -1.0, "yarn_attn_factor": -1.0, "yarn_beta_fast": -1.0,
                    "yarn_beta_slow": -1.0, "yarn_orig_ctx": 0, "defrag_thold": -1.0, "cb_eval": None,
                    "cb_eval_user_data": None, "type_k": 1, "type_v": 1, "embeddings": False, "offload_kqv": True,
                    "no_perf": True, "op_offload": True, "swa_full": True, "kv_unified": False, "samplers": None,
                    "n_samplers": 0}

_P, _I, _U = c_void_p, c_int32, c_uint32
SIGNATURES = {  # name: (result, arguments), as in llama.h of the pinned build
    "llama_backend_init": (None, []),
    "llama_log_set": (None, [_P, _P]),
    "llama_model_default_params": (ModelParams, []),
    "llama_context_default_params": (ContextParams, []),
    "llama_model_load_from_file": (_P, [ctypes.c_char_p, ModelParams]),
    "llama_model_free": (None, [_P]),
    "llama_init_from_model": (_P, [_P, ContextParams]),
    "llama_free": (None, [_P]),
    "llama_model_get_vocab": (_P, [_P]),
    "llama_vocab_n_tokens": (_I, [_P]),
    "llama_n_ctx": (_U, [_P]), "llama_n_batch": (_U, [_P]), "llama_n_ubatch": (_U, [_P]),
    "llama_n_threads": (_I, [_P]), "llama_n_threads_batch": (_I, [_P]),
    "llama_batch_init": (Batch, [_I, _I, _I]),
    "llama_batch_free": (None, [Batch]),
    "llama_decode": (_I, [_P, Batch]),
    "llama_get_logits_ith": (ctypes.POINTER(c_float), [_P, _I]),
    "llama_get_memory": (_P, [_P]),
    "llama_memory_clear": (None, [_P, c_bool]),
    "llama_tokenize": (_I, [_P, ctypes.c_char_p, _I, ctypes.POINTER(c_int32), _I, c_bool, c_bool]),
}
LOG_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, c_void_p)
_LOADED: dict = {}


def _library_path() -> Path:
    spec = util.find_spec("xllamacpp")
    if spec is None or spec.origin is None:
        raise ImportError("the xllamacpp package is not installed")
    found = sorted(Path(spec.origin).parent.glob("xllamacpp*.so")) + sorted(
        Path(spec.origin).parent.glob("xllamacpp*.pyd"))
    if not found:
        raise ImportError(f"no xllamacpp shared library beside {spec.origin}")
    return found[0]


def _sret_extent(function: ctypes._CFuncPtr, size: int) -> int:  # type: ignore[name-defined]
    """How many bytes a struct-returning function writes: on x86-64 (System V and Windows) a struct larger than
    16 bytes is returned through a hidden pointer in the first argument register, so the function is called with
    a guard-filled buffer there and the last byte it changed is found."""
    guard = (ctypes.c_ubyte * (size + 64))(*([0xA5] * (size + 64)))
    probe = ctypes.CFUNCTYPE(None, c_void_p)(ctypes.cast(function, c_void_p).value)
    probe(ctypes.addressof(guard))
    written = [i for i, byte in enumerate(bytes(guard)) if byte != 0xA5]
    return (max(written) + 1) if written else 0


def layout_problems(lib: ctypes.CDLL, context: type = ContextParams, model: type = ModelParams) -> list[str]:
    """What does not match between the structs declared (``context``, ``model``: this module's by default) and the
    loaded build; empty when they match."""
    problems = []
    address = ctypes.cast(lib.llama_context_default_params, c_void_p).value
    defaults = ctypes.CFUNCTYPE(context)(address)()
    for name, want in CONTEXT_DEFAULTS.items():
        got = getattr(defaults, name, "missing")
        if got != want:
            problems.append(f"llama_context_params.{name} reads {got!r} at offset "
                            f"{getattr(context, name).offset}, llama.cpp's default is {want!r}")
    if platform.machine().lower() in ("x86_64", "amd64"):
        for function, struct in (("llama_context_default_params", context), ("llama_model_default_params", model)):
            extent = _sret_extent(getattr(lib, function), ctypes.sizeof(struct))
            if not ctypes.sizeof(struct) - 8 < extent <= ctypes.sizeof(struct):
                problems.append(f"{function} writes {extent} bytes; {struct.__name__} declares "
                                f"{ctypes.sizeof(struct)}")
    for embd, present in ((0, "token"), (8, "embd")):
        batch = lib.llama_batch_init(4, embd, 1)
        try:
            pointers = {name: bool(getattr(batch, name)) for name in ("token", "embd", "pos", "n_seq_id", "seq_id",
                                                                      "logits")}
            want = {name: name != ("embd" if present == "token" else "token") for name in pointers}
            if pointers != want or batch.n_tokens != 0:
                problems.append(f"llama_batch_init(4, {embd}, 1) gives n_tokens {batch.n_tokens} and non-null "
                                f"{pointers}, expected {want}")
        finally:
            lib.llama_batch_free(batch)
    return problems


def library() -> ctypes.CDLL:
    """llama.cpp from the pinned xllamacpp wheel, its functions declared and its struct layouts checked.

    Raises:
        ImportError: xllamacpp missing, another version, a missing function, or a layout mismatch (the reason
            says which; nothing is called with a struct that does not match).
    """
    if "lib" in _LOADED:
        return _LOADED["lib"]
    version = metadata.version("xllamacpp") if util.find_spec("xllamacpp") else None
    if version != PINNED:
        raise ImportError(f"xllamacpp {version or 'is not installed'}{' is installed' if version else ''}: "
                          f"headprune's llama.cpp binding is checked against xllamacpp=={PINNED} "
                          f"(llama.cpp {BUILD}); pip install 'headprune[gguf]'")
    lib = ctypes.CDLL(str(_library_path()))
    for name, (result, arguments) in SIGNATURES.items():
        try:
            function = getattr(lib, name)
        except AttributeError as error:
            raise ImportError(f"llama.cpp in xllamacpp {version} has no {name}") from error
        function.restype, function.argtypes = result, arguments
    problems = layout_problems(lib)
    if problems:
        raise ImportError("headprune's llama.cpp binding does not match this build: " + "; ".join(problems))
    log: list[str] = []
    callback = LOG_CALLBACK(lambda level, text, _: log.append(text.decode("utf-8", "replace")) if level >= 4
                            else None)  # GGML_LOG_LEVEL_ERROR = 4: kept to explain a failed load; the rest dropped
    lib.llama_log_set(callback, None)
    lib.llama_backend_init()
    _LOADED.update(lib=lib, callback=callback, log=log)
    return lib


def runtime_version() -> tuple[str | None, str]:
    """``(a description of the runtime, "")`` when llama.cpp can be used, else ``(None, why not)``."""
    try:
        library()
    except Exception as error:  # noqa: BLE001 - ImportError, or an OSError from a library that does not load
        return None, f"llama.cpp is not usable ({type(error).__name__}: {error})"
    return f"llama.cpp {BUILD} (xllamacpp {PINNED})", ""


class LlamaCpp:
    """One GGUF file loaded in llama.cpp with one context: per-position logits, greedy decoding, tokenization.

    Args:
        n_ctx: the context (prompt plus generated tokens).
        kv_f32: a float32 key/value cache (the gate's choice: llama.cpp's default f16 cache would round keys and
            values); False keeps llama.cpp's default (the benchmark's choice).
        flash_attn: llama.cpp's flash attention (off for the gate: per-layer head counts pad it differently).
        threads: CPU threads (default: half the CPUs, as llama-cpp-python chose; more spin against each other on
            a busy machine).

    Raises:
        ValueError: llama.cpp refused the file or the context (its own error text is in the message).
    """

    def __init__(self, path: Path, *, n_ctx: int, kv_f32: bool = True, flash_attn: bool = False,
                 threads: int | None = None) -> None:
        self.lib = lib = library()
        log = _LOADED["log"]
        del log[:]
        self.model = lib.llama_model_load_from_file(str(path).encode(), lib.llama_model_default_params())
        if not self.model:
            raise ValueError(f"llama.cpp could not load {Path(path).name}: {''.join(log).strip() or 'no reason'}")
        params = lib.llama_context_default_params()
        threads = threads or max(1, (os.cpu_count() or 2) // 2)
        params.n_ctx, params.n_batch = n_ctx, min(n_ctx, 512)
        params.n_ubatch, params.n_threads, params.n_threads_batch = params.n_batch, threads, threads
        params.flash_attn_type = 1 if flash_attn else 0
        if kv_f32:
            params.type_k = params.type_v = 0  # GGML_TYPE_F32
        self.ctx = lib.llama_init_from_model(self.model, params)
        if not self.ctx:
            lib.llama_model_free(self.model)
            raise ValueError(f"llama.cpp could not make a context for {Path(path).name}: {''.join(log).strip()}")
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = int(lib.llama_vocab_n_tokens(self.vocab))
        self.n_ctx, self.n_batch = int(lib.llama_n_ctx(self.ctx)), int(lib.llama_n_batch(self.ctx))
        self.batch = lib.llama_batch_init(self.n_batch, 0, 1)
        for i in range(self.n_batch):
            self.batch.seq_id[i][0] = 0
        self.n_past = 0

    def close(self) -> None:
        if self.ctx:
            self.lib.llama_batch_free(self.batch)
            self.lib.llama_free(self.ctx)
            self.lib.llama_model_free(self.model)
            self.ctx = self.model = None

    def reset(self) -> None:
        """Forget every token (the key/value cache is cleared)."""
        self.lib.llama_memory_clear(self.lib.llama_get_memory(self.ctx), True)
        self.n_past = 0

    def eval(self, tokens: list[int], *, all_logits: bool) -> np.ndarray:
        """Decode ``tokens`` after those already evaluated; the logits of every token (``all_logits``) or of the
        last one, ``(n, vocab)`` float32."""
        rows = []
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start: start + self.n_batch]
            last = start + len(chunk) == len(tokens)
            for i, token in enumerate(chunk):
                self.batch.token[i], self.batch.pos[i], self.batch.n_seq_id[i] = token, self.n_past + i, 1
                self.batch.logits[i] = 1 if all_logits or (last and i == len(chunk) - 1) else 0
            self.batch.n_tokens = len(chunk)
            status = self.lib.llama_decode(self.ctx, self.batch)
            if status != 0:
                raise ValueError(f"llama_decode returned {status} (context {self.n_ctx} tokens, at {self.n_past})")
            self.n_past += len(chunk)
            wanted = range(len(chunk)) if all_logits else ([len(chunk) - 1] if last else [])
            for i in wanted:
                rows.append(np.ctypeslib.as_array(self.lib.llama_get_logits_ith(self.ctx, i),
                                                  shape=(self.n_vocab,)).copy())
        return np.stack(rows) if rows else np.zeros((0, self.n_vocab), dtype=np.float32)

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """llama.cpp's own tokens for ``text`` (BOS as the file's tokenizer asks; special tokens parsed)."""
        data = text.encode("utf-8")
        size = len(data) + 8
        while True:
            out = (c_int32 * size)()
            n = self.lib.llama_tokenize(self.vocab, data, len(data), out, size, add_special, parse_special)
            if n >= 0:
                return list(out[:n])
            size = -n
