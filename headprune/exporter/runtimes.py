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
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from headprune.core.compat import cache_of, passing_cache


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
        # A decoder with a key/value cache: whole sequences go in with an empty past.
        self.past = {i.name: (i.shape[1], i.shape[3]) for i in self.session.get_inputs()
                     if i.name.startswith("past_key_values.")}

    def __call__(self, *, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor | None
                 = None, logits_to_keep: int = 0, **_: object) -> SimpleNamespace:
        feeds = {"input_ids": input_ids.cpu().numpy().astype(np.int64),
                 "attention_mask": attention_mask.cpu().numpy().astype(np.int64)}
        if self.positions:
            feeds["position_ids"] = position_ids.cpu().numpy().astype(np.int64)
        for name, (heads, head_dim) in self.past.items():
            feeds[name] = np.zeros((input_ids.shape[0], heads, 0, head_dim), dtype=np.float32)
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
    """A GGUF file in llama.cpp (:mod:`headprune.exporter.llama_cpp_runtime`) answering the calls headprune's
    evaluator and verifier make of a model: rows run one by one without their padding, logits at every position.

    Args:
        kv_f32: a float32 key/value cache (the gate's choice: llama.cpp's default f16 cache would round keys and
            values); False keeps llama.cpp's default (the benchmark's choice).
        flash_attn: llama.cpp's flash attention (off for the gate: per-layer head counts pad it differently).

    Raises:
        VerificationError: llama.cpp refused the file or the context.
    """

    def __init__(self, path: Path, *, n_ctx: int, eos: tuple[int, ...], threads: int | None = None,
                 kv_f32: bool = True, flash_attn: bool = False) -> None:
        from headprune.errors import VerificationError
        from headprune.exporter.llama_cpp_runtime import LlamaCpp

        try:
            self.llm = LlamaCpp(path, n_ctx=n_ctx, threads=threads, kv_f32=kv_f32, flash_attn=flash_attn)
        except ValueError as error:
            raise VerificationError(f"{error}; nothing was written") from error
        self.eos, self.n_vocab, self.n_ctx = eos, self.llm.n_vocab, self.llm.n_ctx

    def close(self) -> None:
        self.llm.close()

    def logits(self, tokens: list[int]) -> torch.Tensor:
        """``(len(tokens), vocab)`` logits of one unpadded sequence."""
        self.llm.reset()
        return torch.from_numpy(self.llm.eval(tokens, all_logits=True))

    def __call__(self, *, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int = 0,
                 **_: object) -> SimpleNamespace:
        batch, width = input_ids.shape
        out = torch.zeros(batch, width, self.n_vocab)
        for row in range(batch):
            real = attention_mask[row].bool().cpu()
            out[row, real] = self.logits(input_ids[row].cpu()[real].tolist())
        if logits_to_keep:
            out = out[:, -logits_to_keep:]
        return SimpleNamespace(logits=out)

    def tokenize(self, text: str) -> list[int]:
        return self.llm.tokenize(text)

    def greedy(self, prompt: list[int], steps: int, stop: bool = True) -> tuple[list[int], list[torch.Tensor]]:
        """Greedy tokens after ``prompt`` and the logits each was chosen from."""
        self.llm.reset()
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

    def timed(self, prompt: list[int], steps: int) -> tuple[float, float]:
        """The prompt's logits of its last token and the first token, then ``steps`` single-token steps."""
        self.llm.reset()
        start = time.perf_counter()
        token = int(self.llm.eval(prompt, all_logits=False)[-1].argmax())
        middle = time.perf_counter()
        for _ in range(steps):
            token = int(self.llm.eval([token], all_logits=False)[-1].argmax())
        return middle - start, time.perf_counter() - middle

    def generate(self, *, input_ids: torch.Tensor, attention_mask: torch.Tensor, max_new_tokens: int,
                 pad_token_id: int, **_: object) -> torch.Tensor:
        """Like ``transformers``' greedy ``generate`` on left-padded rows: prompt then new tokens, padded."""
        batch, width = input_ids.shape
        out = torch.full((batch, width + max_new_tokens), pad_token_id, dtype=torch.long)
        out[:, :width] = input_ids.cpu()
        for row in range(batch):
            real = attention_mask[row].bool().cpu()
            tokens, _ = self.greedy(input_ids[row].cpu()[real].tolist(), max_new_tokens)
            out[row, width: width + len(tokens)] = torch.tensor(tokens)
        return out
