"""A GGUF file in llama.cpp: one model and one context, through the runtime
:mod:`headprune.exporter.llama_cpp.binding` loads and checks (per-position logits, batched decoding of several
sequences, an encoder's per-token embeddings, tokenization). Every field set on a context is read back from llama.cpp
before it is used. A Ctrl-C stops a load between two tensors and a decode between two nodes of its graph
(``headprune.core.interrupts``): llama.cpp asks, through its progress and abort callbacks."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from headprune.core.interrupts import deferred_interrupt, interrupted
from headprune.errors import InternalCheckError
from headprune.exporter.llama_cpp.binding import Binding, library, physical_cores, read_back


class LlamaCpp:
    """One GGUF file loaded in llama.cpp with one context: per-position logits, greedy decoding, tokenization.

    Args:
        n_ctx: the context (prompt plus generated tokens).
        kv_f32: a float32 key/value cache (the gate's choice: llama.cpp's default f16 cache would round keys and
            values); False keeps llama.cpp's default (the benchmark's choice).
        flash_attn: llama.cpp's flash attention (off for the gate: per-layer head counts pad it differently).
        threads: CPU threads (default: :func:`physical_cores`, llama.cpp's own default; a second thread on a core's
            other hardware thread only spins against the first).
        sequences: sequences the context holds at once (``n_seq_max``); with more than one, in one unified key/value
            buffer, where a sequence copied from another shares its cells instead of copying them
            (:meth:`copy_sequence`).
        embeddings: an encoder's context (BERT-style files), a whole sequence in one micro-batch (its attention reads
            every token of it), without a key/value cache: ``"tokens"``, each token's last hidden state (no pooling,
            llama.cpp's ``LLAMA_POOLING_TYPE_NONE``); ``"pooled"``, the sequence's embedding pooled as the file says
            (:attr:`pooling`). None: a decoder's logits.
        binding: the runtime (default: :func:`library`'s).

    Raises:
        ValueError: llama.cpp refused the file or the context (its own error text is in the message).
        InternalCheckError: a field set did not reach llama.cpp (:func:`read_back`).
    """

    def __init__(self, path: Path, *, n_ctx: int, kv_f32: bool = True, flash_attn: bool = False,
                 threads: int | None = None, sequences: int = 1, embeddings: str | None = None,
                 binding: Binding | None = None) -> None:
        self.binding = binding = binding or library()
        self.lib = lib = binding.lib
        constants = binding.decls.CONSTANTS
        lib.llama_log_set(binding.keep[0], None)  # this binding's log (another may have set its own)
        del binding.log[:]
        self.ctx = self.batch = None
        # Asked by llama.cpp between two tensors of the load and two nodes of a decode's graph: a Ctrl-C stops them.
        self.callbacks = (binding.decls.progress_callback(lambda progress, data: not interrupted()),
                          binding.decls.abort_callback(lambda data: interrupted()))
        model_params = lib.llama_model_default_params()
        _set_callback(model_params, "progress_callback", self.callbacks[0])
        self.model = None
        try:
            with deferred_interrupt():  # a Ctrl-C is raised once the pointer is kept, so that it can be freed
                self.model = lib.llama_model_load_from_file(str(path).encode(), model_params)
        except KeyboardInterrupt:
            if self.model:
                lib.llama_model_free(self.model)
            raise
        if not self.model:
            raise ValueError(f"llama.cpp could not load {Path(path).name}: {self._errors() or 'no reason'}")
        params = lib.llama_context_default_params()
        threads = threads or physical_cores()
        params.n_ctx, params.n_batch = n_ctx, n_ctx if embeddings else min(n_ctx, 512)
        params.n_ubatch, params.n_threads, params.n_threads_batch = params.n_batch, threads, threads
        params.flash_attn_type = constants[f"LLAMA_FLASH_ATTN_TYPE_{'ENABLED' if flash_attn else 'DISABLED'}"]
        # Separate buffers (llama.cpp's default) would copy a whole buffer for each sequence copied across them.
        params.n_seq_max, params.kv_unified = sequences, sequences > 1
        if kv_f32 and not embeddings:
            params.type_k = params.type_v = constants["GGML_TYPE_F32"]
        if embeddings:
            params.embeddings = True
            params.pooling_type = constants["LLAMA_POOLING_TYPE_" + ("NONE" if embeddings == "tokens" else
                                                                     "UNSPECIFIED")]
        _set_callback(params, "abort_callback", self.callbacks[1])
        del binding.log[:]
        try:
            with deferred_interrupt():
                self.ctx = lib.llama_init_from_model(self.model, params)
        except KeyboardInterrupt:
            self.close() if self.ctx else lib.llama_model_free(self.model)
            raise
        if not self.ctx:
            lib.llama_model_free(self.model)
            raise ValueError(f"llama.cpp could not make a context for {Path(path).name}: {self._errors()}")
        wrong = read_back(binding, self.ctx, params, cache=not embeddings)
        if wrong:
            self.close()
            raise InternalCheckError(f"{binding.runtime} did not get what headprune set: " + "; ".join(wrong))
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = int(lib.llama_vocab_n_tokens(self.vocab))
        self.n_embd = int(lib.llama_model_n_embd(self.model))
        self.embeddings = embeddings
        pooling = int(lib.llama_pooling_type(self.ctx))  # the pooling the context uses ("pooled": the file's)
        self.pooling = next(k.removeprefix("LLAMA_POOLING_TYPE_").lower() for k, v in constants.items()
                            if k.startswith("LLAMA_POOLING_TYPE_") and v == pooling)
        self.n_ctx, self.n_batch = int(lib.llama_n_ctx(self.ctx)), int(lib.llama_n_batch(self.ctx))
        self.sequences = int(lib.llama_n_seq_max(self.ctx))
        self.memory = lib.llama_get_memory(self.ctx)
        self.batch = lib.llama_batch_init(self.n_batch, 0, 1)
        self.n_past = 0

    def _errors(self) -> str:
        level = self.binding.decls.CONSTANTS["GGML_LOG_LEVEL_ERROR"]
        return "".join(text for kind, text in self.binding.log if kind >= level).strip()

    def close(self) -> None:
        if self.ctx:
            if self.batch is not None:
                self.lib.llama_batch_free(self.batch)
            self.lib.llama_free(self.ctx)
            self.lib.llama_model_free(self.model)
            self.ctx = self.model = None

    def reset(self) -> None:
        """Forget every token of every sequence (the key/value cache is cleared)."""
        self.lib.llama_memory_clear(self.memory, True)
        self.n_past = 0

    def eval(self, tokens: list[int], *, all_logits: bool) -> np.ndarray:
        """Decode ``tokens`` in sequence 0 after those already evaluated; the logits of every token (``all_logits``)
        or of the last one, ``(n, vocab)`` float32."""
        last = len(tokens) - 1
        out = self.decode([(0, self.n_past + i, token, all_logits or i == last) for i, token in enumerate(tokens)])
        self.n_past += len(tokens)
        return out

    def decode(self, entries: Sequence[tuple[int, int, int, bool]]) -> np.ndarray:
        """Decode ``entries`` (sequence, position, token, whether its logits are wanted) in their order, up to
        ``n_batch`` a ``llama_decode`` call: each sequence's positions must go on from those it holds. The logits
        wanted, in order, ``(n, vocab)`` float32."""
        rows = []
        batch = self.batch
        for start in range(0, len(entries), self.n_batch):
            chunk = entries[start: start + self.n_batch]
            for i, (seq, pos, token, wanted) in enumerate(chunk):
                batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, wanted
                batch.seq_id[i][0] = seq
            batch.n_tokens = len(chunk)
            status = self.lib.llama_decode(self.ctx, batch)  # a Ctrl-C stops it: raised as it returns
            if status != 0:
                raise ValueError(f"llama_decode returned {status} (context {self.n_ctx} tokens, {len(chunk)} in the "
                                 f"batch: {self._errors() or 'no reason logged'})")
            for i, (_, _, _, wanted) in enumerate(chunk):
                if wanted:
                    rows.append(np.ctypeslib.as_array(self.lib.llama_get_logits_ith(self.ctx, i),
                                                      shape=(self.n_vocab,)).copy())
        return np.stack(rows) if rows else np.zeros((0, self.n_vocab), dtype=np.float32)

    def embed(self, tokens: list[int]) -> np.ndarray:
        """One sequence, alone, in an ``embeddings`` context (one batch, positions from 0): the last hidden state
        of every token, ``(n, n_embd)`` float32, or (``"pooled"``) the sequence's pooled embedding, ``(1, n_embd)``.

        Raises:
            ValueError: a sequence longer than the context, or llama.cpp refused it.
        """
        if len(tokens) > self.n_batch:
            raise ValueError(f"a sequence of {len(tokens)} tokens is longer than the context ({self.n_batch})")
        batch = self.batch
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, i, 1, True
            batch.seq_id[i][0] = 0
        batch.n_tokens = len(tokens)
        status = self.lib.llama_decode(self.ctx, batch)
        if status != 0:
            raise ValueError(f"llama_decode returned {status} ({len(tokens)} tokens: "
                             f"{self._errors() or 'no reason logged'})")
        rows = []
        found = [self.lib.llama_get_embeddings_seq(self.ctx, 0)] if self.embeddings == "pooled" else [
            self.lib.llama_get_embeddings_ith(self.ctx, i) for i in range(len(tokens))]
        for row in found:
            if not row:  # llama.cpp gives none where the context does not compute embeddings
                raise InternalCheckError("llama.cpp gave no embeddings for a context made to compute them")
            rows.append(np.ctypeslib.as_array(row, shape=(self.n_embd,)).copy())
        return np.stack(rows) if rows else np.zeros((0, self.n_embd), dtype=np.float32)

    def copy_sequence(self, source: int, target: int) -> None:
        """Give sequence ``target`` every cell of ``source`` (in a unified buffer: shared, not copied)."""
        self.lib.llama_memory_seq_cp(self.memory, source, target, -1, -1)

    def forget(self, seq: int, start: int = 0) -> None:
        """Remove sequence ``seq``'s tokens from position ``start`` on (cells other sequences share stay theirs).

        Raises:
            InternalCheckError: llama.cpp could not remove them (it can always for the whole cache of a decoder).
        """
        if not self.cut(seq, start):
            raise InternalCheckError(f"llama.cpp could not remove sequence {seq}'s tokens from {start} on")

    def cut(self, seq: int, start: int) -> bool:
        """Remove sequence ``seq``'s tokens from position ``start`` on where the memory can: False, nothing removed,
        where it cannot, as a recurrent state (a Mamba2 or convolution layer's) that took those tokens in cannot be
        taken back to an earlier position; the whole sequence always can (:meth:`forget` from 0)."""
        return bool(self.lib.llama_memory_seq_rm(self.memory, seq, start, -1))

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """llama.cpp's own tokens for ``text`` (BOS as the file's tokenizer asks; special tokens parsed)."""
        data = text.encode("utf-8")
        size = len(data) + 8
        while True:
            out = (ctypes.c_int32 * size)()
            n = self.lib.llama_tokenize(self.vocab, data, len(data), out, size, add_special, parse_special)
            if n >= 0:
                return list(out[:n])
            size = -n


def _set_callback(params: Any, name: str, callback: Any) -> None:
    """Set a callback field of a llama.cpp parameter struct: a pointer where the declarations keep one (xllamacpp's,
    generated), the callback itself where the field is typed (llama-cpp-python's)."""
    field = dict(params._fields_)[name]
    setattr(params, name, ctypes.cast(callback, ctypes.c_void_p) if field is ctypes.c_void_p else callback)
