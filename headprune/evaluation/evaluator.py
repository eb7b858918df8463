"""The evaluation engine: score a task example by example, with or without heads ablated.

An :class:`Evaluator` turns a task into model inputs once (through its kind's scorer, ``headprune.scoring``)
and keeps the batches, so screening hundreds of conditions on the same examples pays for tokenisation once.
It owns what every kind shares: batching (longest first, to cut padding), padding (causal models on the
left with explicit position ids, so an example's result does not depend on its batch up to float rounding),
the forward pass and the out-of-memory retry, and composes the rest: greedy decoding of generating kinds
(``evaluation.generation``) and the shortcuts with the results of a plain full forward pass: a prompt prefix
shared by every sequence is computed once per condition (causal LMs, ``evaluation.prefix``), ablated runs
start from cached layer inputs of the intact model (``evaluation.layer_reuse``), and the output head is applied
once to the read rows of many batches (``evaluation.output_head``).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator, Sequence

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from headprune.core.compat import logits_at, passing_cache
from headprune.core.cpu_linear import fast_linears
from headprune.errors import TaskError
from headprune.evaluation.batching import BatchPlan, Work, plan_batches
from headprune.evaluation.first_position import last_layer_at_first_position
from headprune.evaluation.generation import Generation
from headprune.evaluation.guards import check_finite, check_lengths
from headprune.evaluation.layer_cache import LayerInputCache
from headprune.evaluation.layer_reuse import LayerReuse
from headprune.evaluation.output_head import OutputHead, Waiting
from headprune.evaluation.prefix import SharedPrefix
from headprune.evaluation.results import EvalResult, ExampleResult
from headprune.heads import Head
from headprune.loading.models import LoadedModel
from headprune.scoring import Item, scorer_for
from headprune.surgery.ablation import AblationMode, ablated, collect_head_means
from headprune.tasks import Task

log = logging.getLogger("headprune")

DEFAULT_BATCH_SIZE: int | str = "auto"

Batch = tuple[torch.Tensor, torch.Tensor, dict]  # (input_ids, attention_mask, extra forward keywords)


def _same(logits: torch.Tensor) -> torch.Tensor:
    return logits


class Evaluator:
    """Scores one task on one model, for any number of ablation conditions.

    Args:
        lm: the model.
        task: the task.
        batch_size: sequences per forward pass, or ``auto`` (sized to the device's free memory, with a token
            budget; see ``headprune.evaluation.batching``), or another evaluator's ``plan``. An out-of-memory
            error halves it and retries.
        reuse_layers: keep the intact model's layer inputs from the first intact run and start later
            ablated runs at the lowest ablated layer (same results, less work; see ``layer_cache``).
        share_prefix: causal LMs: compute the keys/values of a prompt prefix shared by every sequence (a
            few-shot prompt) once per condition instead of once per sequence (not for a model with recurrent
            layers, whose cache holds more than keys and values: ``HeadGrid.recurrent``).

    Raises:
        TaskError: a bad batch size, or a task kind the model cannot be scored on.
    """

    def __init__(self, lm: LoadedModel, task: Task, *, batch_size: int | str | BatchPlan = DEFAULT_BATCH_SIZE,
                 reuse_layers: bool = False, share_prefix: bool = True) -> None:
        self.lm = lm
        self.task = task
        self.plan = plan_batches(lm, batch_size)
        self.scorer = scorer_for(task, lm)
        tokenizer = lm.tokenizer
        self._pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
        self._items: list[Item] = [item for index, example in enumerate(task.examples)
                                   for item in self.scorer.items(index, example)]
        self._by_example: list[list[int]] = [[] for _ in task.examples]
        for i, item in enumerate(self._items):
            self._by_example[item.example].append(i)
        self._first_items = {indices[0] for indices in self._by_example}  # to count progress in examples
        check_lengths(lm.model, task, self._items, generates=self.scorer.generates)  # before any work
        self._batches = self.plan.batches([len(item.tokens) for item in self._items])
        shared = share_prefix and not lm.grid.recurrent
        self.prefix = SharedPrefix.of(self._items, self.scorer.readout) if shared else SharedPrefix()
        self.layers = LayerReuse(lm, reuse_layers)
        self.layers.reset(self._batch_widths())
        self.generation = (Generation(lm, self.scorer, self._items, self._pad_id, self.prefix)
                           if self.scorer.generates else None)
        self.output_head = OutputHead(lm.model, self._pad_id, lm.device) if self.scorer.readout == "logprobs" else None

    def _batch_widths(self) -> list[tuple[int, int]]:
        """Per batch, its rows and the padded tokens per row that a forward pass computes (after the prefix)."""
        return [(len(b), max(len(self._items[i].tokens) for i in b) - len(self.prefix)) for b in self._batches]

    def work(self) -> Work:
        """What one pass over the task's sequences computes (lengths, read rows, shared prefix, batch shapes)."""
        return Work(tuple(len(i.tokens) for i in self._items), tuple(i.read for i in self._items),
                    len(self.prefix), tuple(self._batch_widths()))

    @property
    def _layer_cache(self) -> LayerInputCache | None:  # the layer cache itself (tests read and set it)
        return self.layers.cache

    @_layer_cache.setter
    def _layer_cache(self, cache: LayerInputCache | None) -> None:
        self.layers.cache = cache

    @property
    def batch_size(self) -> int:
        return self.plan.sequences

    @property
    def largest_batch(self) -> int:
        """The most sequences one forward pass takes (batches are cut by length within the plan)."""
        return max(len(batch) for batch in self._batches)

    # ---------------------------------------------------------------- inputs

    def _tensors(self, batch: Sequence[int]) -> Batch:
        """Padded ``(B, T)`` ids and mask on the model's input device, plus position ids (left-padded causal
        models) or segment ids (encoder text pairs)."""
        items = [self._items[i] for i in batch]
        left = not self.lm.is_encoder
        width = max(len(item.tokens) for item in items)
        ids = torch.full((len(items), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(items), width), dtype=torch.long)
        types = torch.zeros((len(items), width), dtype=torch.long) if any(it.type_ids for it in items) else None
        for row, item in enumerate(items):
            span = slice(width - len(item.tokens), width) if left else slice(0, len(item.tokens))
            ids[row, span] = torch.tensor(item.tokens)
            mask[row, span] = 1
            if types is not None and item.type_ids:
                types[row, span] = torch.tensor(item.type_ids)
        extra: dict = {"position_ids": (mask.cumsum(-1) - 1).clamp(min=0)} if left else {}
        if types is not None:
            extra["token_type_ids"] = types
        device = self.lm.device
        return ids.to(device), mask.to(device), {k: v.to(device) for k, v in extra.items()}

    @property
    def sequences(self) -> int:
        """How many model inputs the task became (a choice task may run one per choice)."""
        return len(self._items)

    def reference_batches(self, *, after_prefix: bool = False) -> Iterator[Batch]:
        """The task's inputs as model batches (for mean ablation's reference statistics); ``after_prefix``: each row's
        tokens after the shared prefix, right-padded, with the mask over the prefix and them and their position ids."""
        for batch in self._batches:
            if not (after_prefix and self.prefix):
                yield self._tensors(batch)
                continue
            ids, mask, positions = self.prefix.suffixes([self._items[i].tokens for i in batch], self._pad_id)
            yield ids.to(self.lm.device), mask.to(self.lm.device), {"position_ids": positions.to(self.lm.device)}

    # ---------------------------------------------------------------- forward passes

    def _forward(self, batch: list[int], prefix_cache: object | None, *, consume: bool = False
                 ) -> list[torch.Tensor]:
        """Per row of ``batch``, the scorer's readout (see ``headprune.scoring.base``)."""
        readout = self.scorer.readout
        if readout == "logprobs":
            return self._logprobs(batch, prefix_cache, consume=consume).result()
        ids, mask, extra = self._tensors(batch)
        if readout == "pooled":
            out = self.lm.model(input_ids=ids, attention_mask=mask, output_hidden_states=True, **extra)
            # (B, T, D): the last layer's, whatever head the model carries (a runtime may give only its own).
            hidden = out.hidden_states[-1] if getattr(out, "hidden_states", None) else out.last_hidden_state
            weights = mask[..., None].to(hidden.dtype)
            return list(((hidden * weights).sum(1) / weights.sum(1).clamp(min=1)).float())  # mean over real tokens
        with last_layer_at_first_position(self.lm):  # (B, C): its own head (a classifier reading [CLS]: there only)
            return list(self.lm.model(input_ids=ids, attention_mask=mask, **extra).logits.float())

    def _logprobs(self, batch: list[int], prefix_cache: object | None, *, consume: bool, defer: bool = False
                  ) -> Waiting:
        """Per row, float32 log-probs ``(read_i, V)`` at the row's last ``read_i`` positions: ready at once, or
        when ``defer``, after the output head's next flush (``evaluation.output_head``).

        ``prefix_cache`` is copied before use, unless ``consume`` says it was made for this batch alone.
        """
        items = [self._items[i] for i in batch]
        keep = max(item.read for item in items)

        def finish(logits: torch.Tensor) -> list[torch.Tensor]:
            logprobs = F.log_softmax(pick(logits).float(), dim=-1)  # (B, keep, V), float32 whatever the dtype
            return [logprobs[row, keep - item.read:] for row, item in enumerate(items)]

        if prefix_cache is None:
            ids, mask, extra = self._tensors(batch)
            call, pick = dict(input_ids=ids, attention_mask=mask, logits_to_keep=keep, **extra), _same
        else:
            # The shared prefix's keys/values are reused; each row's own tokens follow it, padded on the right.
            device = self.lm.device
            ids, mask, positions = self.prefix.suffixes([item.tokens for item in items], self._pad_id)
            last = torch.tensor([len(item.tokens) - len(self.prefix) for item in items])[:, None]  # (B, 1)
            keep_at = (last - keep + torch.arange(keep)).clamp(min=0)  # (B, keep): each row's final positions
            cache = self.prefix.rows(prefix_cache, len(items), consume=consume)
            keep_arg, pick = logits_at(keep_at.to(device))
            call = dict(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                        **passing_cache(cache), use_cache=True, logits_to_keep=keep_arg)
        return self.output_head.run(call, finish, defer=defer,  # type: ignore[union-attr]
                                    keep_cache=prefix_cache is not None)

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
        """Score every example with ``heads`` ablated (none: the intact model).

        Out of GPU memory, the batches are halved (with a warning) and the condition runs again.

        Raises:
            TaskError: out of memory even with one sequence per batch.
        """
        heads = self.lm.grid.check(heads)
        with fast_linears(self.lm.model):
            while True:
                try:
                    if heads and self.layers.recapture:  # the layer cache was per batch: capture it for the new ones
                        self._run((), mode=mode, means=means, progress=False, label=label)
                        self.layers.recapture = False
                    return self._run(heads, mode=mode, means=means, progress=progress, label=label)
                except torch.OutOfMemoryError:
                    self._shrink()

    def _shrink(self) -> None:
        """Halve the batches after an out-of-memory error, or give up with a clear message."""
        smaller = self.plan.halved()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        if smaller is None:
            raise TaskError(f"out of memory on {self.lm.device} even with one sequence per batch (the longest has "
                            f"{len(self._items[self._batches[0][0]].tokens)} tokens): use a smaller --dtype, "
                            "--device-map auto over more GPUs, or shorter examples", settings=("batch_size",))
        log.warning("out of memory on %s with batches of %s; retrying with %s", self.lm.device, self.plan, smaller)
        self.plan = smaller
        self._batches = self.plan.batches([len(item.tokens) for item in self._items])
        self.layers.reset(self._batch_widths())

    def _run(self, heads: tuple[Head, ...], *, mode: AblationMode, means: torch.Tensor | None, progress: bool,
             label: str) -> EvalResult:
        values: list[torch.Tensor | None] = [None] * len(self._items)
        bar = tqdm(total=len(self.task), desc=label, unit="ex", disable=not progress, file=sys.stderr, leave=False)
        waiting: list[tuple[list[int], Waiting]] = []
        for state in (self.output_head, self.generation):  # nothing left over from a pass cut short (out of memory)
            if state is not None:
                state.reset()
        if self.generation is not None:  # its decoding starts where the pass does, past what the intact run's shares
            self.generation.continuations.condition(self.layers.checkpoints, self.layers.start(heads), not heads)

        def take_waiting() -> None:  # the batches whose output head has been applied
            for batch, outs in waiting:
                for i, out in zip(batch, outs.result()):
                    values[i] = self.scorer.value(self._items[i], out)
                    if self.generation is not None:
                        self.generation.observe(i, out)  # what greedy writes while it follows the forced tokens
            waiting.clear()

        with ablated(self.lm, heads, mode=mode, means=means):
            prefix_cache = self.layers.prefix_cache(self.prefix, heads)  # the shared prompt prefix, once per condition
            # A generating task decodes on from each batch's own teacher-forced keys and values (its output head
            # not deferred: its rows to decode are known once its read-out is), in groups of up to a batch's rows.
            settle = self.generation is not None and self.generation.shortcut and prefix_cache is not None
            for number, batch in enumerate(self._batches):
                with self.layers.context(number, heads):
                    outs = (self._logprobs(batch, prefix_cache, consume=False, defer=not settle)
                            if self.output_head is not None else Waiting.ready(self._forward(batch, prefix_cache)))
                waiting.append((batch, outs))
                if self.output_head is not None and (self.output_head.full or number == len(self._batches) - 1):
                    self.output_head.flush()  # outside the layer cache's context: one token through every layer
                if self.output_head is None or not self.output_head.waiting:
                    take_waiting()
                if settle:
                    forced = self.layers.forced_keys_values(number, heads, outs.keys_values, len(self.prefix))
                    if forced is not None:
                        self.generation.settle(batch, forced, self.plan.sequences)  # type: ignore[union-attr]
                bar.update(len(self._first_items.intersection(batch)))
            generated = ({} if self.generation is None else
                         self.generation.finish(self._batches, prefix_cache, self.plan.sequences))
        bar.close()
        results = []
        for index, example in enumerate(self.task.examples):
            decoded = generated.get(index)
            correct, margin = self.scorer.judge(example, [values[i] for i in self._by_example[index]],
                                                decoded.text if decoded is not None else None)
            results.append(ExampleResult(example.id, correct, margin) if decoded is None else
                           ExampleResult(example.id, correct, margin, text=decoded.text, decision=decoded.gap))
        return EvalResult(self.task.name, self.task.kind, tuple(results))

    @torch.inference_mode()
    def check_finite(self) -> None:
        """Refuse a model whose intact outputs on the first batch hold NaN or infinity (``evaluation.guards``):
        one batch, run before anything is scored or written."""
        with fast_linears(self.lm.model):
            outputs = self._forward(self._batches[0], self.prefix.cache(self.lm.model, self.lm.device), consume=True)
        check_finite(self.lm.name, self.task, outputs)

    def surrogate_margins(self) -> Iterator[torch.Tensor]:
        """Per batch, a differentiable sum of the scorer's margin-like scores (first-order attribution).

        Gradients flow, so call it under ``torch.enable_grad()``.
        """
        for batch in self._batches:
            # The prefix is recomputed per batch: each batch's graph is freed by its own backward pass.
            outs = self._forward(batch, self.prefix.cache(self.lm.model, self.lm.device), consume=True)
            total = outs[0].new_zeros(())
            for i, out in zip(batch, outs):
                item = self._items[i]
                total = total + self.scorer.surrogate(item, self.scorer.value(item, out),
                                                      self.task.examples[item.example])
            yield total

    def warm_layer_cache(self) -> None:
        """Capture the intact model's layer inputs now if they are not (e.g. the baseline came from a journal)."""
        if self.layers.active and not self.layers.complete:
            self.run()

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
    batch_size: int | str = DEFAULT_BATCH_SIZE,
    progress: bool = False,
) -> EvalResult:
    """Score ``task`` on ``lm`` with ``heads`` ablated. For ``mean`` without ``means``, the heads' means
    are computed on the task's own inputs."""
    evaluator = Evaluator(lm, task, batch_size=batch_size)
    if mode == "mean" and means is None:
        means = evaluator.head_means()
    return evaluator.run(heads, mode=mode, means=means, progress=progress)
