"""The runtimes an export is run in, one class each: torch (transformers), ONNX Runtime, ONNX Runtime GenAI and
llama.cpp. The export's gates and ``scripts/bench/export.py`` run the same code.

Every runner that decodes has ``greedy(prompt, steps) -> (tokens, logits behind each token)`` (what the runtime
gate compares, :mod:`headprune.exporter.runtime_check`) and the timing option ``timed(prompt, steps) ->
(prefill seconds, decode seconds)``: the prompt's forward pass and first token, then exactly ``steps``
single-token steps with no stop at end-of-sequence, the way the runtime itself is driven in a deployment (what
the benchmark compares). ``OnnxModel`` and ``LlamaCppModel`` also answer the calls headprune's evaluator and
verifier make of a model (``model(input_ids=..., attention_mask=...)``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from headprune.core.compat import cache_of, passing_cache
from headprune.exporter.llama_cpp.rows import SharedRows

# A context whose rows share a prompt prefix holds at most this many tokens in all (unless one row needs more): the
# prefix, every row of a group after it and what they generate (float32 keys and values of SmolLM2-135M: 46 KB a
# token, 0.2 GB for 4096).
SHARED_CELLS = 4096


class TorchRunner:
    """A transformers model, one token a step through its key/value cache (under whatever ablation is active)."""

    def __init__(self, model: torch.nn.Module, *, eos: tuple[int, ...] = (), device: torch.device | str = "cpu"
                 ) -> None:
        self.model, self.eos, self.device = model, eos, device

    @torch.inference_mode()
    def greedy(self, prompt: list[int], steps: int, stop: bool = True) -> tuple[list[int], list[torch.Tensor]]:
        """Greedy tokens after ``prompt`` and the logits each was chosen from (stopping at end-of-sequence)."""
        out = self.model(input_ids=torch.tensor([prompt], device=self.device), use_cache=True)
        tokens, logits = [], []
        for _ in range(steps):
            last = out.logits[0, -1].float().cpu()
            token = int(last.argmax())
            tokens.append(token)
            logits.append(last)
            if stop and token in self.eos:
                break
            out = self.model(input_ids=torch.tensor([[token]], device=self.device), **passing_cache(cache_of(out)),
                             use_cache=True)
        return tokens, logits

    @torch.inference_mode()
    def greedy_many(self, prompts: list[list[int]], steps: int) -> list[tuple[list[int], list[torch.Tensor]]]:
        """:meth:`greedy` of every prompt in one batch (left-padded, with position ids): the same tokens and logits
        up to float rounding, one forward pass a step for all of them."""
        width = max(len(p) for p in prompts)
        ids = torch.zeros((len(prompts), width), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, prompt in enumerate(prompts):
            ids[row, width - len(prompt):], mask[row, width - len(prompt):] = torch.tensor(prompt), 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        device = self.device
        out = self.model(input_ids=ids.to(device), attention_mask=mask.to(device),
                         position_ids=positions.to(device), use_cache=True)
        rows: list[tuple[list[int], list[torch.Tensor]]] = [([], []) for _ in prompts]
        going = [True] * len(prompts)
        for step in range(steps):
            last = out.logits[:, -1].float().cpu()
            chosen = last.argmax(-1)
            for row, (tokens, logits) in enumerate(rows):
                if going[row]:
                    tokens.append(int(chosen[row]))
                    logits.append(last[row])
                    going[row] = tokens[-1] not in self.eos
            if not any(going) or step == steps - 1:
                break
            mask = torch.cat([mask, torch.ones((len(prompts), 1), dtype=torch.long)], dim=1)
            positions = positions[:, -1:] + 1
            out = self.model(input_ids=chosen[:, None].to(device), attention_mask=mask.to(device),
                             position_ids=positions.to(device), **passing_cache(cache_of(out)), use_cache=True)
        return rows

    @torch.inference_mode()
    def timed(self, prompt: list[int], steps: int) -> tuple[float, float]:
        """One forward over the prompt (last logits only, as ``generate`` does), then one token a step."""
        start = time.perf_counter()
        out = self.model(input_ids=torch.tensor([prompt], device=self.device), use_cache=True, logits_to_keep=1)
        token = int(out.logits[0, -1].argmax())
        middle = time.perf_counter()
        for _ in range(steps):
            out = self.model(input_ids=torch.tensor([[token]], device=self.device), **passing_cache(cache_of(out)),
                             use_cache=True)
            token = int(out.logits[0, -1].argmax())
        return middle - start, time.perf_counter() - middle

    def close(self) -> None:
        pass


def empty_past(shape: Sequence[Any], batch: int) -> np.ndarray:
    """An empty past for a decoder graph's cache input of ``shape`` (its dimensions as onnxruntime lists them):
    ``(batch, heads, 0, head)``, or ``(2, batch, heads, 0, head)`` where keys and values are stacked; a recurrent
    layer's state (every size but the batch fixed: a convolution's last inputs, a scan's state) starts at zeros."""
    if all(isinstance(size, int) for size in shape[1:]):
        return np.zeros((batch, *shape[1:]), dtype=np.float32)
    sizes = (batch, shape[1], 0, shape[3]) if len(shape) == 4 else (2, batch, shape[2], 0, shape[4])
    return np.zeros(sizes, dtype=np.float32)


class OnnxModel:
    """An onnxruntime session that answers the calls headprune's evaluator and verifier make of a model.

    Args:
        config: the config of the model the graph was exported from: scorers read it as they read a torch model's
            (a classifier's labels).
    """

    def __init__(self, path: Path, *, output: str, positions: bool, config: Any) -> None:
        import onnxruntime

        self.config = config

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.output, self.positions = output, positions
        # A decoder with a cache: whole sequences go in with an empty past (each layer's keys and values apart, or
        # stacked: GenAI's gpt2; a recurrent layer's states, zeros), every dimension but batch and past length fixed.
        self.past = {i.name: i.shape for i in self.session.get_inputs() if i.name.startswith(("past_", "past."))}

    def __call__(self, *, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor | None
                 = None, logits_to_keep: int = 0, **_: object) -> SimpleNamespace:
        feeds = {"input_ids": input_ids.cpu().numpy().astype(np.int64),
                 "attention_mask": attention_mask.cpu().numpy().astype(np.int64)}
        if self.positions:
            feeds["position_ids"] = position_ids.cpu().numpy().astype(np.int64)
        for name, shape in self.past.items():
            feeds[name] = empty_past(shape, input_ids.shape[0])
        (output,) = self.session.run([self.output], feeds)
        tensor = torch.from_numpy(output)
        if self.output == "logits" and logits_to_keep and tensor.dim() == 3:
            tensor = tensor[:, -logits_to_keep:]
        return SimpleNamespace(**{self.output: tensor})


class GenaiRunner:
    """ONNX Runtime GenAI's own generator loop on an exported folder (``genai_config.json`` beside the graph).

    Args:
        threads: intra-op threads of its session (``None``: GenAI's default).
    """

    def __init__(self, folder: Path, threads: int | None = None) -> None:
        import onnxruntime_genai as og

        config = og.Config(str(folder))
        if threads is not None:
            config.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": threads}}}}))
        self.og, self.model = og, og.Model(config)

    def greedy(self, prompt: list[int], steps: int) -> tuple[list[int], list[torch.Tensor]]:
        """The greedy continuation of ``prompt`` (up to ``steps`` tokens) and the logits behind each token."""
        params = self.og.GeneratorParams(self.model)
        params.set_search_options(do_sample=False, max_length=len(prompt) + steps)
        generator = self.og.Generator(self.model, params)
        generator.append_tokens([prompt])
        tokens, logits = [], []
        while not generator.is_done():
            logits.append(torch.from_numpy(np.array(generator.get_logits())).reshape(-1).float())
            generator.generate_next_token()
            tokens.append(int(generator.get_next_tokens()[0]))
        return tokens, logits

    def timed(self, prompt: list[int], steps: int) -> tuple[float, float]:
        """``append_tokens`` runs the prompt; each ``generate_next_token`` picks a token from the last logits and
        (after the first) runs the model on the previous one."""
        params = self.og.GeneratorParams(self.model)
        length = len(prompt) + steps + 1
        params.set_search_options(do_sample=False, max_length=length, min_length=length)  # no early stop
        generator = self.og.Generator(self.model, params)
        start = time.perf_counter()
        generator.append_tokens([prompt])
        generator.generate_next_token()  # the first token, from the prompt's logits
        middle = time.perf_counter()
        for _ in range(steps):
            generator.generate_next_token()
        return middle - start, time.perf_counter() - middle

    def close(self) -> None:
        self.model = None


class LlamaCppModel:
    """A GGUF file in llama.cpp (:mod:`headprune.exporter.llama_cpp.runtime`) answering the calls headprune's
    evaluator and verifier make of a model, at every real position of each row, without its padding.

    Args:
        kv_f32: a float32 key/value cache (the gate's choice: llama.cpp's default f16 cache would round keys and
            values); False keeps llama.cpp's default (the benchmark's choice).
        flash_attn: llama.cpp's flash attention (off for the gate: per-layer head counts pad it differently).
        rows: with more than one, the rows of a call share their common prompt prefix's keys and values, evaluated
            once and kept between calls, and decode side by side, up to ``rows`` at a time
            (:mod:`headprune.exporter.llama_cpp.rows`); the context then holds ``n_ctx`` tokens for each row, up to
            :data:`SHARED_CELLS` in all. With one, each row runs alone from its first token.

    Raises:
        VerificationError: llama.cpp refused the file or the context.
    """

    def __init__(self, path: Path, *, n_ctx: int, eos: tuple[int, ...], threads: int | None = None,
                 kv_f32: bool = True, flash_attn: bool = False, rows: int = 1) -> None:
        from headprune.errors import VerificationError
        from headprune.exporter.llama_cpp.runtime import LlamaCpp

        cells = n_ctx if rows <= 1 else max(n_ctx, min(n_ctx * rows, SHARED_CELLS))
        try:
            self.llm = LlamaCpp(path, n_ctx=cells, threads=threads, kv_f32=kv_f32, flash_attn=flash_attn,
                                sequences=1 if rows <= 1 else rows + 1)
        except ValueError as error:
            raise VerificationError(f"{error}; nothing was written") from error
        self.shared = SharedRows(self.llm) if rows > 1 else None
        self.shares_prefix = self.shared is not None  # the verifier may give it whole rows that share a prefix
        self.alone = False  # a sequence was run alone since the shared prefix was last held
        self.eos, self.n_vocab, self.n_ctx = eos, self.llm.n_vocab, n_ctx

    def close(self) -> None:
        self.llm.close()

    def _alone(self) -> None:
        """Clear the context for one sequence run alone in sequence 0 (where a shared prefix is kept: forgotten, and
        cleared again before rows share one)."""
        self.llm.reset()
        self.alone = True

    def _rows(self) -> SharedRows:
        """The rows' shared prefix, on a context no sequence run alone has left tokens in."""
        if self.alone:
            self.shared.forget()  # type: ignore[union-attr]
            self.alone = False
        return self.shared  # type: ignore[return-value]

    def logits(self, tokens: list[int]) -> torch.Tensor:
        """``(len(tokens), vocab)`` logits of one unpadded sequence."""
        self._alone()
        return torch.from_numpy(self.llm.eval(tokens, all_logits=True))

    def __call__(self, *, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int = 0,
                 **_: object) -> SimpleNamespace:
        batch, width = input_ids.shape
        keep = min(logits_to_keep, width) if logits_to_keep else width
        out = torch.zeros(batch, keep, self.n_vocab)  # padding columns stay zero
        columns = [attention_mask[row].cpu().nonzero()[:, 0] for row in range(batch)]  # each row's real tokens
        rows = [input_ids[row].cpu()[cols].tolist() for row, cols in enumerate(columns)]
        # Each row's real tokens within the last ``keep`` columns: a run at its end (they are in order).
        wanted = [range(int((cols < width - keep).sum()), len(cols)) for cols in columns]
        if self.shared is None:
            found = [self.logits(tokens)[want.start:].numpy() if tokens else None for tokens, want in zip(rows, wanted)]
        else:
            found = self._rows().logits(rows, wanted)
        for row, (cols, want, values) in enumerate(zip(columns, wanted, found)):
            if len(want):
                out[row, cols[want.start:] - (width - keep)] = torch.from_numpy(values)
        return SimpleNamespace(logits=out)

    def tokenize(self, text: str) -> list[int]:
        return self.llm.tokenize(text)

    def greedy(self, prompt: list[int], steps: int, stop: bool = True) -> tuple[list[int], list[torch.Tensor]]:
        """Greedy tokens after ``prompt`` and the logits each was chosen from."""
        self._alone()
        last = torch.from_numpy(self.llm.eval(prompt, all_logits=False)[-1])
        tokens, logits = [], []
        for _ in range(steps):
            token = int(last.argmax())
            tokens.append(token)
            logits.append(last)
            if stop and token in self.eos:
                break
            last = torch.from_numpy(self.llm.eval([token], all_logits=False)[-1])
        return tokens, logits

    def greedy_many(self, prompts: list[list[int]], steps: int) -> list[tuple[list[int], list[torch.Tensor]]]:
        """:meth:`greedy` of every prompt, side by side where rows share a context (each row's own keys and values,
        one token a step, as alone; the prefix the prompts share evaluated once)."""
        if self.shared is None:
            return [self.greedy(prompt, steps) for prompt in prompts]
        logits: list[list[np.ndarray]] = [[] for _ in prompts]
        tokens = self._rows().greedy(prompts, steps, lambda rows, written: [t[-1] in self.eos for t in written],
                                     logits)
        return [(row, [torch.from_numpy(x) for x in chosen]) for row, chosen in zip(tokens, logits)]

    def timed(self, prompt: list[int], steps: int) -> tuple[float, float]:
        """The prompt's logits of its last token and the first token, then ``steps`` single-token steps."""
        self._alone()
        start = time.perf_counter()
        token = int(self.llm.eval(prompt, all_logits=False)[-1].argmax())
        middle = time.perf_counter()
        for _ in range(steps):
            token = int(self.llm.eval([token], all_logits=False)[-1].argmax())
        return middle - start, time.perf_counter() - middle

    def generate(self, *, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
                 pad_token_id: int, stopping_criteria: Sequence[Callable] | None = None, **_: object
                 ) -> torch.Tensor:
        """Like ``transformers``' greedy ``generate`` on left-padded rows: prompt then new tokens, padded after a row
        ends (an end-of-sequence token, or ``stopping_criteria`` called as ``generate`` calls them)."""
        batch, width = input_ids.shape
        out = torch.full((batch, width + max_new_tokens), pad_token_id, dtype=torch.long)
        out[:, :width] = input_ids.cpu()
        prompts = [input_ids[row].cpu()[attention_mask[row].bool().cpu()].tolist() for row in range(batch)]
        written: list[list[int]] = [[] for _ in range(batch)]

        def ended(rows: list[int], tokens: list[list[int]]) -> list[bool]:
            """Whether each of ``rows``, having written ``tokens``, has ended: the criteria see every row's text so
            far, as in ``generate``."""
            for row, row_tokens in zip(rows, tokens):
                written[row] = row_tokens
            done = [row_tokens[-1] in self.eos for row_tokens in tokens]
            if stopping_criteria:
                ids = out[:, : width + max(map(len, written))].clone()
                for row, row_tokens in enumerate(written):
                    ids[row, width: width + len(row_tokens)] = torch.tensor(row_tokens, dtype=torch.long)
                stop = torch.zeros(batch, dtype=torch.bool)
                for criterion in stopping_criteria:
                    stop |= criterion(ids, None).cpu().bool()
                done = [d or bool(stop[row]) for d, row in zip(done, rows)]
            return done

        if self.shared is None:
            found = [self._greedy_alone(prompt, max_new_tokens, row, ended) for row, prompt in enumerate(prompts)]
        else:
            found = self._rows().greedy(prompts, max_new_tokens, ended)
        for row, tokens in enumerate(found):
            out[row, width: width + len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        return out

    def _greedy_alone(self, prompt: list[int], steps: int, row: int,
                      ended: Callable[[list[int], list[list[int]]], list[bool]]) -> list[int]:
        self._alone()
        tokens: list[int] = []
        last = self.llm.eval(prompt, all_logits=False)[-1]
        while True:
            tokens.append(int(torch.from_numpy(last).argmax()))
            if len(tokens) >= steps or ended([row], [tokens])[0]:
                return tokens
            last = self.llm.eval([tokens[-1]], all_logits=False)[-1]
