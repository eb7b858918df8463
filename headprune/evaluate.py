"""The evaluation engine: score a task example by example, with or without heads ablated.

An :class:`Evaluator` tokenises a task once and keeps the batches, so screening hundreds of ablation
conditions on the same examples pays for tokenisation once. Batches are sorted by length to cut padding;
causal LMs are padded on the left with explicit position ids, so an example's result does not depend on
the batch it lands in (up to float rounding).

Per example it reports ``correct`` (``None`` for text tasks) and a continuous ``margin`` where higher is better:
    choice    log-likelihood (or per-byte log-likelihood) of the right choice minus the best wrong one;
              for encoders, cosine similarity of the right choice minus the best wrong one.
    generate  the smallest, over the target's tokens under teacher forcing, of the log-prob of the target
              token minus the best other token: positive exactly when greedy decoding would emit the target
              tokens. The target is scored as the model would write it: after one space when the prompt
              ends in a non-space character (``"2 + 3 ="`` -> ``" 5"``), as is.
    text      minus the mean token negative log-likelihood.
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from headprune.ablation import AblationMode, ablated, collect_head_means
from headprune.errors import TaskError
from headprune.heads import Head
from headprune.layer_cache import LayerInputCache
from headprune.models import LoadedModel
from headprune.tasks import Task

DEFAULT_BATCH_SIZE = 16
MIN_SHARED_PREFIX = 16  # tokens; shorter shared prefixes are not worth a separate pass


@dataclass(frozen=True)
class ExampleResult:
    id: str
    correct: bool | None
    margin: float


@dataclass(frozen=True)
class EvalResult:
    """Per-example results of one condition (a head set ablated, or none)."""

    task: str
    kind: str
    results: tuple[ExampleResult, ...]

    @property
    def n(self) -> int:
        return len(self.results)

    @property
    def correct(self) -> np.ndarray:
        """``(n,)`` bool; all False for text tasks."""
        return np.array([bool(r.correct) for r in self.results], dtype=bool)

    @property
    def margins(self) -> np.ndarray:
        return np.array([r.margin for r in self.results], dtype=np.float64)

    @property
    def accuracy(self) -> float | None:
        return None if self.kind == "text" else float(self.correct.mean())

    @property
    def mean_nll(self) -> float | None:
        return float(-self.margins.mean()) if self.kind == "text" else None

    def summary(self) -> dict:
        out: dict = {"task": self.task, "kind": self.kind, "n": self.n}
        if self.kind == "text":
            out["mean_nll"] = self.mean_nll
        else:
            out["accuracy"] = self.accuracy
            out["correct"] = int(self.correct.sum())
        out["mean_margin"] = float(self.margins.mean())
        return out


@dataclass(frozen=True)
class _Item:
    """One sequence to run: which example it belongs to and which tokens are scored."""

    example: int
    tokens: tuple[int, ...]  # model input
    scored: tuple[int, ...]  # tokens predicted by the last len(scored) positions (causal) or () (encoder)
    choice: int = -1  # choice index; -1 when the item scores every choice at once (single-token choices)


class Evaluator:
    """Scores one task on one model, for any number of ablation conditions.

    Args:
        lm: the model.
        task: the task.
        batch_size: sequences per forward pass.
        reuse_layers: keep the intact model's layer inputs from the first intact run and start later
            ablated runs at the lowest ablated layer (same results, less work; see ``layer_cache``).
        share_prefix: causal LMs: compute the keys/values of a prompt prefix shared by every example (a
            few-shot prompt) once per condition instead of once per example.
    """

    def __init__(self, lm: LoadedModel, task: Task, *, batch_size: int = DEFAULT_BATCH_SIZE,
                 reuse_layers: bool = False, share_prefix: bool = True) -> None:
        if batch_size < 1:
            raise TaskError(f"batch size must be at least 1, got {batch_size}")
        if lm.is_encoder and task.kind != "choice":
            raise TaskError(f"{task.kind} tasks need a causal language model; {lm.name} is an encoder")
        self.lm = lm
        self.task = task
        self.batch_size = batch_size
        tokenizer = lm.tokenizer
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
        self._items = self._prepare()
        first: dict[int, int] = {}
        for i, item in enumerate(self._items):
            first.setdefault(item.example, i)
        self._first_items = set(first.values())  # one item per example, to count progress in examples
        # Longest first: the peak memory shows in the first batch, and similar lengths share batches.
        order = sorted(range(len(self._items)), key=lambda i: (-len(self._items[i].tokens), i))
        self._batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        self._prefix = self._shared_prefix() if share_prefix else ()
        self._layer_cache: LayerInputCache | None = None
        if reuse_layers:
            padded = sum(len(b) * (max(len(self._full_tokens(self._items[i])) for i in b) - len(self._prefix))
                         for b in self._batches)
            self._layer_cache = LayerInputCache.for_budget(lm, padded)

    # ---------------------------------------------------------------- preparation

    def _encode(self, text: str, special: bool = True) -> list[int]:
        return list(self.lm.tokenizer(text, add_special_tokens=special)["input_ids"])

    def _context_and_continuation(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        # lm-evaluation-harness convention: trailing spaces of the context belong to the continuation, and the
        # continuation's tokens are those of the whole string after the context's own tokens.
        stripped = context.rstrip(" ")
        continuation = context[len(stripped) :] + continuation
        context_tokens = self._encode(stripped)
        whole = self._encode(stripped + continuation)
        continuation_tokens = whole[len(context_tokens) :]
        if not continuation_tokens:
            raise TaskError(f"continuation {continuation!r} has no tokens after its prompt")
        return context_tokens, continuation_tokens

    def _prepare(self) -> list[_Item]:
        items: list[_Item] = []
        for index, example in enumerate(self.task.examples):
            if self.lm.is_encoder:
                items.append(_Item(index, tuple(self._encode(example.prompt)), ()))
                items.extend(_Item(index, tuple(self._encode(c)), (), choice=k) for k, c in enumerate(example.choices))
            elif self.task.kind == "choice":
                pairs = [self._context_and_continuation(example.prompt, c) for c in example.choices]
                if all(len(cont) == 1 and ctx == pairs[0][0] for ctx, cont in pairs):
                    # Every choice is one token after the same context: one forward scores them all.
                    items.append(_Item(index, tuple(pairs[0][0]), tuple(cont[0] for _, cont in pairs)))
                else:
                    items.extend(_Item(index, tuple(ctx + cont[:-1]), tuple(cont), choice=k)
                                 for k, (ctx, cont) in enumerate(pairs))
            elif self.task.kind == "generate":
                sep = "" if not example.prompt or example.prompt[-1].isspace() else " "
                ctx, cont = self._context_and_continuation(example.prompt, sep + example.target.strip())
                items.append(_Item(index, tuple(ctx + cont[:-1]), tuple(cont)))
            else:
                tokens = self._encode(example.text)
                if len(tokens) < 2:
                    raise TaskError(f"example {example.id}: text needs at least two tokens")
                items.append(_Item(index, tuple(tokens[:1]), tuple(tokens[1:])))
        return items

    def _tensors(self, batch: Sequence[int], left: bool) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """Padded ``(B, T)`` ids and mask, plus position ids for left-padded causal LMs."""
        sequences = [self._full_tokens(self._items[i]) for i in batch]
        width = max(len(s) for s in sequences)
        ids = torch.full((len(sequences), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(sequences), width), dtype=torch.long)
        for row, seq in enumerate(sequences):
            span = slice(width - len(seq), width) if left else slice(0, len(seq))
            ids[row, span] = torch.tensor(seq)
            mask[row, span] = 1
        extra = {"position_ids": (mask.cumsum(-1) - 1).clamp(min=0)} if left else {}
        return ids, mask, extra

    def _full_tokens(self, item: _Item) -> tuple[int, ...]:
        # Text items store the first token as input and the rest as scored: the input is the whole text.
        if self.task.kind == "text":
            return item.tokens + item.scored[:-1]
        return item.tokens

    def _shared_prefix(self) -> tuple[int, ...]:
        """The longest token prefix common to every input, if long enough to be worth sharing."""
        if self.lm.is_encoder or len(self._items) < 2:
            return ()
        inputs = [self._full_tokens(item) for item in self._items]
        common = os.path.commonprefix(inputs)  # type: ignore[type-var]
        # Every scored position must lie after the prefix.
        length = min(len(common), min(len(t) - self._predicted(it) for t, it in zip(inputs, self._items)))
        return tuple(common[:length]) if length >= MIN_SHARED_PREFIX else ()

    def reference_batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, dict]]:
        """The task's inputs as model batches (for mean ablation's reference statistics)."""
        for batch in self._batches:
            yield self._tensors(batch, left=not self.lm.is_encoder)

    # ---------------------------------------------------------------- running

    @torch.inference_mode()
    def run(
        self,
        heads: Iterable[Head] = (),
        *,
        mode: AblationMode = "zero",
        means: torch.Tensor | None = None,
        progress: bool = False,
        label: str = "eval",
    ) -> EvalResult:
        """Score every example with ``heads`` ablated (none: the intact model)."""
        scores: dict[tuple[int, int], float] = {}  # (example, choice) -> score
        margins: dict[int, float] = {}
        embeddings: dict[int, torch.Tensor] = {}
        heads = self.lm.grid.check(heads)
        bar = tqdm(total=len(self.task), desc=label, unit="ex", disable=not progress, file=sys.stderr, leave=False)
        with ablated(self.lm, heads, mode=mode, means=means):
            prefix_cache = self._prefix_cache()  # the shared prompt prefix, once per condition
            for number, batch in enumerate(self._batches):
                with self._layer_context(number, heads):
                    if self.lm.is_encoder:
                        self._run_encoder(batch, embeddings)
                    else:
                        self._run_causal(batch, scores, margins, prefix_cache)
                bar.update(len(self._first_items.intersection(batch)))
            if self.lm.is_encoder:
                self._encoder_scores(embeddings, scores)
            generated = self._generate() if self.task.kind == "generate" else {}
        bar.close()
        return EvalResult(self.task.name, self.task.kind, tuple(
            self._example_result(index, scores, margins, generated) for index in range(len(self.task))
        ))

    def warm_layer_cache(self) -> None:
        """Capture the intact model's layer inputs now if they are not (e.g. the baseline came from a journal)."""
        if self._layer_cache is not None and self._layer_cache.checkpoints and not self._layer_cache.complete(
                len(self._batches)):
            self.run()

    def _layer_context(self, number: int, heads: tuple[Head, ...]) -> AbstractContextManager:
        """Capture layer inputs on the first intact run; replay them for ablated runs once captured."""
        cache = self._layer_cache
        if cache is None or not cache.checkpoints:
            return nullcontext()
        if not heads:
            return cache.capture(number) if not cache.complete(len(self._batches)) else nullcontext()
        if cache.complete(len(self._batches)):
            return cache.replay(number, cache.start_for(min(h.layer for h in heads)))
        return nullcontext()

    def _example_result(self, index: int, scores: dict, margins: dict, generated: dict) -> ExampleResult:
        example = self.task.examples[index]
        if self.task.kind == "choice":
            values = np.array([scores[(index, k)] for k in range(len(example.choices))])
            others = np.delete(values, example.answer)
            return ExampleResult(example.id, bool(np.argmax(values) == example.answer),
                                 float(values[example.answer] - others.max()))
        if self.task.kind == "generate":
            return ExampleResult(example.id, generated[index].strip() == example.target.strip(), margins[index])
        return ExampleResult(example.id, None, margins[index])

    def _predicted(self, item: _Item) -> int:
        """How many final positions of an item's input are scored (one for single-token choices)."""
        return 1 if self.task.kind == "choice" and item.choice < 0 else len(item.scored)

    def _prefix_cache(self) -> object | None:
        """Keys and values of the shared prompt prefix under the current ablation (one row)."""
        if not self._prefix:
            return None
        ids = torch.tensor([self._prefix])
        return self.lm.model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=True,
                             logits_to_keep=1).cache

    def _row_logprobs(self, batch: list[int], prefix_cache: object | None, *, consume: bool = False
                      ) -> list[torch.Tensor]:
        """Per row, log-probs ``(n_i, V)`` at the positions that predict its scored tokens.

        ``prefix_cache`` is copied before use, unless ``consume`` says it was made for this batch alone.
        """
        counts = [self._predicted(self._items[i]) for i in batch]
        keep = max(counts)
        if prefix_cache is None:
            ids, mask, extra = self._tensors(batch, left=True)
            logits = self.lm.model(input_ids=ids, attention_mask=mask, logits_to_keep=keep, **extra).logits
            logprobs = F.log_softmax(logits.float(), dim=-1)  # (B, keep, V)
        else:
            # The shared prefix's keys/values are reused; each row's own tokens follow it, padded on the right.
            suffixes = [self._full_tokens(self._items[i])[len(self._prefix):] for i in batch]
            width, start = max(len(t) for t in suffixes), len(self._prefix)
            ids = torch.full((len(batch), width), self._pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), start + width), dtype=torch.long)
            mask[:, :start] = 1
            for row, tokens in enumerate(suffixes):
                ids[row, : len(tokens)] = torch.tensor(tokens)
                mask[row, start : start + len(tokens)] = 1
            positions = torch.arange(start, start + width).expand(len(batch), width)
            last = torch.tensor([len(t) for t in suffixes])[:, None]  # (B, 1)
            keep_at = (last - keep + torch.arange(keep)).clamp(min=0)  # (B, keep): each row's final positions
            cache = prefix_cache if consume else copy.deepcopy(prefix_cache)
            cache.batch_repeat_interleave(len(batch))
            logits = self.lm.model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache,
                                   use_cache=True, logits_to_keep=keep_at).logits
            logprobs = F.log_softmax(logits.float(), dim=-1)  # (B, keep, V)
        return [logprobs[row, keep - n :] for row, n in enumerate(counts)]

    def _run_causal(self, batch: list[int], scores: dict, margins: dict, prefix_cache: object | None) -> None:
        for i, logprobs in zip(batch, self._row_logprobs(batch, prefix_cache)):
            item = self._items[i]
            example = self.task.examples[item.example]
            if self.task.kind == "choice" and item.choice < 0:
                last = logprobs[-1]  # every choice is one token predicted at the last position
                for k, token in enumerate(item.scored):
                    scores[(item.example, k)] = self._choice_score(float(last[token]), example.choices[k])
                continue
            target = torch.tensor(item.scored)
            picked = logprobs.gather(-1, target[:, None])[:, 0]  # (k,): position t predicts scored[t]
            if self.task.kind == "choice":
                scores[(item.example, item.choice)] = self._choice_score(float(picked.sum()),
                                                                          example.choices[item.choice])
            elif self.task.kind == "generate":
                rivals = logprobs.scatter(-1, target[:, None], float("-inf")).max(-1).values
                margins[item.example] = float((picked - rivals).min())
            else:
                margins[item.example] = float(picked.mean())  # minus the mean NLL

    def surrogate_margins(self) -> Iterator[torch.Tensor]:
        """Per batch, a differentiable sum of margin-like scores (for first-order attribution).

        choice: log-likelihood of the right choice minus the wrong ones' mean (one-token choices: minus the
        best wrong one, exactly the margin); generate: log-prob of the target; text: mean token log-prob.
        Causal LMs only; gradients flow, so call it under ``torch.enable_grad()``.
        """
        if self.lm.is_encoder:
            raise TaskError("attribution needs a causal language model; encoders are screened exactly")
        for batch in self._batches:
            # The prefix is recomputed per batch: each batch's graph is freed by its own backward pass.
            rows = self._row_logprobs(batch, self._prefix_cache(), consume=True)
            total = rows[0].new_zeros(())
            for i, logprobs in zip(batch, rows):
                item = self._items[i]
                example = self.task.examples[item.example]
                if self.task.kind == "choice" and item.choice < 0:
                    last = logprobs[-1, list(item.scored)]  # (choices,)
                    others = torch.cat([last[: example.answer], last[example.answer + 1 :]])
                    total = total + last[example.answer] - others.max()
                    continue
                picked = logprobs.gather(-1, torch.tensor(item.scored)[:, None])[:, 0]
                if self.task.kind == "choice":
                    sign = 1.0 if item.choice == example.answer else -1.0 / (len(example.choices) - 1)
                    total = total + sign * picked.sum()
                else:
                    total = total + (picked.mean() if self.task.kind == "text" else picked.sum())
            yield total

    def _choice_score(self, loglik: float, choice: str) -> float:
        return loglik / len(choice.encode("utf-8")) if self.task.length_normalize else loglik

    def _run_encoder(self, batch: list[int], embeddings: dict[int, torch.Tensor]) -> None:
        ids, mask, _ = self._tensors(batch, left=False)
        hidden = self.lm.model(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, T, D)
        weights = mask[..., None].to(hidden.dtype)
        pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1)  # (B, D) mean over real tokens
        for row, i in enumerate(batch):
            embeddings[i] = pooled[row]

    def _encoder_scores(self, embeddings: dict[int, torch.Tensor], scores: dict) -> None:
        """Cosine similarity of each choice's embedding to its prompt's (items are prompt, then choices)."""
        for i, item in enumerate(self._items):
            if item.choice < 0:
                anchor = embeddings[i]
            else:
                scores[(item.example, item.choice)] = float(F.cosine_similarity(anchor, embeddings[i], dim=0))

    def _generate(self) -> dict[int, str]:
        """Greedy decoding for generate tasks: the text up to the first newline (not yet trimmed)."""
        texts: dict[int, str] = {}
        tokenizer = self.lm.tokenizer
        for batch in self._batches:
            prompts = [self._context_only(i) for i in batch]
            width = max(len(p) for p in prompts)
            ids = torch.full((len(prompts), width), self._pad_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, prompt in enumerate(prompts):
                ids[row, width - len(prompt) :] = torch.tensor(prompt)
                mask[row, width - len(prompt) :] = 1
            out = self.lm.model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                         max_new_tokens=self.task.max_new_tokens, pad_token_id=self._pad_id)
            for row, i in enumerate(batch):
                text = tokenizer.decode(out[row, width:], skip_special_tokens=True)
                texts[self._items[i].example] = text.split("\n", 1)[0]
        return texts

    def _context_only(self, i: int) -> tuple[int, ...]:
        item = self._items[i]
        return item.tokens[: len(item.tokens) - (len(item.scored) - 1)]

    def head_means(self) -> torch.Tensor:
        """Per-head mean outputs of the intact model over this task's inputs (for ``mean`` ablation)."""
        return collect_head_means(self.lm, self.reference_batches())


def evaluate(
    lm: LoadedModel,
    task: Task,
    *,
    heads: Iterable[Head] = (),
    mode: AblationMode = "zero",
    means: torch.Tensor | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: bool = False,
) -> EvalResult:
    """Score ``task`` on ``lm`` with ``heads`` ablated. For ``mean`` without ``means``, the heads' means
    are computed on the task's own inputs."""
    evaluator = Evaluator(lm, task, batch_size=batch_size)
    if mode == "mean" and means is None:
        means = evaluator.head_means()
    return evaluator.run(heads, mode=mode, means=means, progress=progress)
