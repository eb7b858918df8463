"""Greedy decoding of a generating task's prompts, with how close each answer came to being otherwise.

Greedy decoding is a function of the logits, so wherever its tokens so far equal the teacher-forced ones, its
next token is the teacher-forced pass's argmax at that position. The evaluator's teacher-forced pass of an
example (prompt + target, read at every target position and the one after it) therefore already tells the
first tokens greedy writes: the target's tokens up to the first one greedy would not choose, plus greedy's
choice there (or, when it chooses every target token, the token after the target). An example whose known
tokens end its answer (an end-of-sequence token, the scorer's stop string, ``max_new_tokens``) is decided
without decoding; only the rest are decoded, from where the known tokens end, a batch stopping as soon as every
row in it has ended. Where the teacher-forced pass ran on the shared prompt prefix's keys and values, its own
keys and values (each row's prompt and the target tokens greedy followed) are where decoding goes on from
(:meth:`Generation.settle`): only greedy's own tokens are computed, not the prompt again; elsewhere the rest are
decoded from their prompt, on top of the shared prefix's keys and values (:meth:`Generation.finish`). A step also
reads the tokens the first condition (find's intact run) wrote next, keeping those greedy chooses too
(:meth:`Generation._step`): where few rows decode, a few; where a row starts as the intact run's did, all of them,
from the ablated layer up (``evaluation.continuation``). That is the answer and the per-step gaps plain
``model.generate`` gives, up to float rounding (the contract of ``headprune.evaluation.contract``: an answer may
differ only where a step's top-1 minus top-2 gap is within the precision's tolerance). Models that are not torch
modules (an ONNX session, llama.cpp), generation configs with a processor that changes greedy's scores and models
with recurrent layers (``HeadGrid.recurrent``) get plain ``model.generate``. The answer is the text up to the scorer's
stop (``Scorer.stop``) and its decision gap the smallest top-1 minus top-2 gap over the steps that decided it
(``headprune.evaluation.decoding``).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext

import torch
from transformers import LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from headprune.core.compat import cache_of, cropped, full_length, passing_cache, stacked
from headprune.evaluation.continuation import IntactContinuations, joined, rows_of
from headprune.evaluation.decoding import (Generated, StepGaps, decided_steps, decision_gap, eos_ids,
                                           looked_up, plain_greedy, with_drafts)
from headprune.evaluation.prefix import SharedPrefix
from headprune.loading.models import LoadedModel
from headprune.scoring import Item, Scorer
from headprune.tasks import Example

# Tokens a decoding step reads at about the cost of one on a CPU, where a step of a few rows is bound by reading
# every weight: a step drafts (see Generation._draft) at most this many tokens over its rows. A step of more rows
# is bound by its arithmetic, where a drafted token costs as much as the step it may save, and drafts nothing.
DRAFT_TOKENS = 16

class Generation:
    """Greedy decoding of ``items``' generation prompts for one model and scorer.

    Per condition: :meth:`observe` each item's teacher-forced readout, then :meth:`finish`.
    """

    def __init__(self, lm: LoadedModel, scorer: Scorer, items: Sequence[Item], pad_id: int,
                 prefix: SharedPrefix | None = None, *, shortcut: bool = True) -> None:
        self.lm = lm
        self.scorer = scorer
        self.items = items
        self.pad_id = pad_id
        self.prefix = prefix or SharedPrefix()
        # A recurrent layer's state takes every token it read: drafted tokens cannot be masked back out of it
        self.shortcut = shortcut and plain_greedy(lm.model) and not lm.grid.recurrent
        self.eos = eos_ids(lm.model)
        self.max_new = scorer.task.max_new_tokens
        self._known: dict[int, tuple[list[int], list[float]]] = {}
        self._found: dict[int, Generated] = {}  # per example, answered by settle() in this condition
        # settle()'s rows waiting to be decoded: per batch, its keys and values and its rows (item, tokens, gaps)
        self._settling: list[tuple[object, list[tuple[int, list[int], list[float]]]]] = []
        self._prior: dict[int, list[int]] = {}  # per item, the first condition's greedy tokens (see _draft)
        self.decoded_rows = 0  # rows decoded beyond the teacher-forced pass, over this object's life (a statistic)
        self.drafted = self.drafts_kept = 0  # tokens drafted and drafted tokens greedy kept, likewise
        self.continuations = IntactContinuations(lm)  # the intact run's texts, read from the ablated layer up

    def reset(self) -> None:
        """Forget what a condition cut short (out of memory) observed or left waiting."""
        self._known, self._found, self._settling = {}, {}, []

    def observe(self, index: int, readout: torch.Tensor) -> None:
        """Item ``index``'s teacher-forced log-probs ``(read, V)``: keep the greedy tokens and gaps they fix."""
        if not self.shortcut:
            return
        item = self.items[index]
        start = len(self.scorer.generation_prompt(item))
        forced = item.tokens[start:]
        first = (start - 1) - (len(item.tokens) - item.read)  # the readout row that predicts greedy's first token
        if first < 0:
            return  # the readout does not reach back to the prompt's end: decode this one from its prompt
        top = readout[first:].topk(2, dim=-1)
        chosen = top.indices[:, 0].tolist()
        gaps = (top.values[:, 0] - top.values[:, 1]).tolist()
        follows = next((j for j, token in enumerate(forced) if chosen[j] != token), len(forced))
        self._known[index] = (list(forced[:follows]) + [chosen[follows]], gaps[: follows + 1])

    def _decided(self, index: int) -> tuple[list[int], list[float], bool]:
        """Item ``index``'s known greedy tokens and gaps (up to ``max_new_tokens``), and whether they end it."""
        tokens, gaps = self._known.pop(index, ([], []))
        tokens, gaps = tokens[: self.max_new], gaps[: self.max_new]
        return tokens, gaps, len(tokens) >= self.max_new or self.ended(index, tokens)

    @torch.inference_mode()
    def settle(self, batch: Sequence[int], forced: object, group_rows: int) -> None:
        """After ``batch``'s teacher-forced pass on the shared prefix (every item of it observed): answer its items,
        decoding those their known tokens do not end on from ``forced``, that pass's keys and values (the prefix
        and each row's tokens after it, right-padded), which it consumes. Rows to decode wait for those of later
        batches, up to ``group_rows`` (a decoding step reads every weight whatever its rows: the more, the
        cheaper each)."""
        if not self.shortcut:
            return
        keep: list[int] = []  # rows of the batch to decode
        rows: list[tuple[int, list[int], list[float]]] = []
        for row, index in enumerate(batch):
            tokens, gaps, ended = self._decided(index)
            if ended:
                self._found[self.items[index].example] = self._answered(index, tokens, gaps)
            elif tokens:
                keep.append(row)
                rows.append((index, tokens, gaps))
            else:
                self._known[index] = (tokens, gaps)  # no known token: finish() decodes it from its prompt
        if keep:
            forced.batch_select_indices(torch.tensor(keep, device=self.lm.device))  # type: ignore[attr-defined]
            self._settling.append((forced, rows))
        if sum(len(waiting) for _, waiting in self._settling) >= group_rows:
            self._decode_settling()

    def _decode_settling(self) -> None:
        """Decode the rows that :meth:`settle` keeps waiting, from their batches' keys and values side by side. Those
        that ``IntactContinuations.follows`` take their first step apart, from the ablated layer up; then all go on
        together."""
        if not self._settling:
            return
        caches = [cache for cache, _ in self._settling]
        settling = [row for _, rows in self._settling for row in rows]
        self._settling = []
        width = max(cache.get_seq_length() for cache in caches)  # type: ignore[attr-defined]
        cache = caches[0] if len(caches) == 1 else stacked(caches, width)
        # Each row keeps its keys/values up to its known tokens but the last (the target's, as far as greedy
        # followed it); the last (greedy's own choice) goes in next, at the position after them.
        kept = torch.tensor([len(self.scorer.generation_prompt(self.items[index])) + len(tokens) - 1
                             for index, tokens, _ in settling])
        mask = (torch.arange(width + 1)[None, :] < kept[:, None]).long()
        mask[:, -1] = 1
        device, indices = self.lm.device, [index for index, _, _ in settling]
        ids = torch.tensor([[tokens[-1]] for _, tokens, _ in settling], device=device)
        mask, kept = mask.to(device), kept.to(device)
        rows = [(tokens, gaps) for _, tokens, gaps in settling]
        self.decoded_rows += len(rows)
        if self.continuations.capturing:  # the intact run: its texts are read once more, on a copy of the keys/values
            copy, knowns = stacked([cache], width), [list(tokens) for tokens, _ in rows]
        follow = [self.continuations.follows(index, tokens) for index, tokens, _ in settling]
        state = (indices, rows, ids, mask, kept[:, None], cache)
        if any(follow):  # in groups of texts of like lengths: a step computes each row to the longest
            whole, state = state, rows_of(state, [k for k, f in enumerate(follow) if not f], width)
            for group in self.continuations.groups([k for k, f in enumerate(follow) if f], indices):
                state = joined(self._step(*rows_of(whole, group, width), replay=True), state)  # type: ignore[misc]
        if state is not None:
            self._greedy(*state)
        for index, (tokens, gaps) in zip(indices, rows):
            self._found[self.items[index].example] = self._answered(index, tokens, gaps)
        if self.continuations.capturing:
            drafts = [self._draft(index, known, self.max_new) for index, known in zip(indices, knowns)]
            self.continuations.capture(indices, knowns, copy, *with_drafts(ids, mask, kept[:, None], drafts,
                                                                          self.pad_id)[:3])

    def finish(self, batches: Sequence[Sequence[int]], prefix_cache: object | None, batch_rows: int
               ) -> dict[int, Generated]:
        """Per example, the answer part of the greedy text and its decision gap (see :class:`Generated`)."""
        if not self.shortcut:
            return self.generate(batches)
        self._decode_settling()
        found, self._found = self._found, {}
        known: dict[int, tuple[list[int], list[float]]] = {}
        pending: list[int] = []
        for index in (i for batch in batches for i in batch):
            if self.items[index].example in found:
                continue
            tokens, gaps, ended = self._decided(index)
            if ended:
                found[self.items[index].example] = self._answered(index, tokens, gaps)
            else:
                pending.append(index)
                known[index] = (tokens, gaps)
        self._known = {}
        pending.sort(key=lambda i: -(len(self.items[i].tokens)))
        for start in range(0, len(pending), batch_rows):
            batch = pending[start: start + batch_rows]
            for index, (tokens, gaps) in zip(batch, self._decode([known[i] for i in batch], batch, prefix_cache)):
                found[self.items[index].example] = self._answered(index, tokens, gaps)
        return found

    def ended(self, index: int, tokens: Sequence[int]) -> bool:
        """Whether greedy's text for item ``index`` ends within ``tokens``: an end-of-sequence token, or the
        scorer's stop reached (a stop string, once in the text, stays there; see ``decided_steps``)."""
        if any(token in self.eos for token in tokens):
            return True
        return bool(tokens) and self.scorer.ended(self.scorer.tokens.decode(tokens), self._example(index))

    def _example(self, index: int) -> Example:
        return self.scorer.task.examples[self.items[index].example]

    @torch.inference_mode()
    def _decode(self, known: list[tuple[list[int], list[float]]], batch: list[int], prefix_cache: object | None
                ) -> list[tuple[list[int], list[float]]]:
        """Greedy decoding of ``batch`` on from its known tokens, until every row has ended; rows are left-padded
        after the shared prefix (whose keys and values are reused) with explicit position ids."""
        rows = [(list(tokens), list(gaps)) for tokens, gaps in known]
        prompts = [list(self.scorer.generation_prompt(self.items[i])) + tokens for i, (tokens, _) in zip(batch, rows)]
        prefix = self.prefix if prefix_cache is not None else SharedPrefix()
        ids, mask, positions = prefix.suffixes(prompts, self.pad_id, left=True)
        device = self.lm.device
        cache = None if prefix_cache is None else prefix.rows(prefix_cache, len(rows))
        self.decoded_rows += len(rows)
        return self._greedy(batch, rows, ids.to(device), mask.to(device), positions.to(device), cache)

    def _draft(self, index: int, tokens: list[int], width: int) -> list[int]:
        """Tokens to check in parallel after item ``index``'s ``tokens``, at most ``width``: what the first condition
        that decoded it (find's intact run) wrote next, where its text so far is the same (its last token left out:
        the step that reads it would only choose what follows an ended text); elsewhere what followed the text's last
        tokens where they came before, in its prompt and tokens or that condition's (``decoding.looked_up``)."""
        prior = self._prior.get(index)
        if prior is not None and prior[: len(tokens)] == tokens:
            return prior[len(tokens): len(prior) - 1][:width]
        if not width:
            return []
        return looked_up([*self.scorer.generation_prompt(self.items[index]), *tokens], prior or [], width)

    def _draft_width(self, rows: int) -> int:
        """How many tokens a step of ``rows`` rows drafts per row: ``DRAFT_TOKENS`` over the rows, in all."""
        return max(0, min(self.max_new, DRAFT_TOKENS // rows - 1))

    def _greedy(self, batch: Sequence[int], rows: list[tuple[list[int], list[float]]], ids: torch.Tensor,
                mask: torch.Tensor, positions: torch.Tensor, cache: object | None
                ) -> list[tuple[list[int], list[float]]]:
        """Greedy steps (:meth:`_step`) from input ``ids`` (mask over ``cache`` and them, their position ids; each
        row's last column its latest token), appending each row's tokens and gaps to ``rows`` (of items ``batch``)
        until every row has ended."""
        state: tuple | None = (list(batch), list(rows), ids, mask, positions, cache)
        while state is not None:
            state = self._step(*state)
        return rows

    def _step(self, batch: list[int], rows: list[tuple[list[int], list[float]]], ids: torch.Tensor,
              mask: torch.Tensor, positions: torch.Tensor, cache: object | None, *, replay: bool = False
              ) -> tuple | None:
        """One greedy step of ``rows`` (see :meth:`_greedy`): the state of the rows that go on, or ``None``.

        A step also reads, after a row's latest token, the tokens :meth:`_draft` expects next (right-padded:
        ``(rows, 1 + drafted)`` logits): greedy keeps the drafted tokens as long as each is its own choice, and the
        step's choice after them, so a text an ablation leaves unchanged takes one step, not one per token. A
        drafted token greedy did not keep is masked out of the cache, and the row goes on after the last one it
        kept. Rows that have ended leave the batch. ``replay``: the step drafts the intact run's whole text and runs
        from the ablated layer up (``evaluation.continuation``)."""
        device = self.lm.device
        drafts = [self._draft(index, row[0], self.max_new if replay else self._draft_width(len(rows)))
                  for index, row in zip(batch, rows)]
        ids, mask, positions, drafted = with_drafts(ids, mask, positions, drafts, self.pad_id)
        with self.continuations.replayed(batch, 1 + drafted) if replay else nullcontext():
            out = self.lm.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                                logits_to_keep=1 + drafted, **({} if cache is None else passing_cache(cache)))
        if replay:
            self.continuations.complete(cache_of(out), batch, 1 + drafted)
        top = out.logits[:, -1 - drafted:].float().topk(2, dim=-1)  # (rows, 1 + drafted, 2)
        chosen, gaps = top.indices[..., 0].tolist(), (top.values[..., 0] - top.values[..., 1]).tolist()
        followed = [self._follow(index, row, draft, chosen[k], gaps[k])
                    for k, (index, row, draft) in enumerate(zip(batch, rows, drafts))]
        self.drafted += sum(len(draft) for draft in drafts)
        self.drafts_kept += sum(kept for kept, _ in followed)
        going = [k for k, (_, runs) in enumerate(followed) if runs]
        if not going:
            return None
        total = mask.shape[1]
        for k, (kept, _) in enumerate(followed):  # drafted tokens greedy did not keep are hidden from later steps
            mask[k, total - drafted + kept:] = 0
        # Ended rows leave the batch, and drafted positions no row going on kept leave the cache: a step's cost grows
        # with its rows' keys and values, copied at every step.
        select = torch.tensor(going, device=device)
        past, unused = cache_of(out), drafted - max(followed[k][0] for k in going)
        if len(going) < len(rows):
            past.batch_select_indices(select)
        if unused and full_length(past) == total:
            cropped(past, total - unused)
            mask = mask[:, : total - unused]
        latest = positions.shape[1] - 1 - drafted + torch.tensor([kept for kept, _ in followed], device=device)
        positions = (positions.gather(1, latest[:, None]) + 1)[select]  # each row's last kept input's, plus 1
        batch, rows = [batch[k] for k in going], [rows[k] for k in going]
        ids = torch.tensor([[row[0][-1]] for row in rows], device=device)
        return batch, rows, ids, torch.cat([mask[select], mask.new_ones((len(rows), 1))], dim=1), positions, past

    def _follow(self, index: int, row: tuple[list[int], list[float]], draft: list[int], chosen: list[int],
                gaps: list[float]) -> tuple[int, bool]:
        """Append to ``row`` greedy's choices of one step (``chosen``/``gaps`` after the row's latest token and each
        drafted token; the last ones follow padding where the draft is shorter than the step's): as many as follow
        from drafted tokens greedy chose too. Returns how many drafted tokens were kept and whether the row runs on."""
        tokens, row_gaps = row
        for j in range(len(draft) + 1):
            tokens.append(chosen[j])
            row_gaps.append(gaps[j])
            if len(tokens) >= self.max_new or self.ended(index, tokens):
                return j, False
            if j == len(draft) or tokens[-1] != draft[j]:
                return j, True
        raise AssertionError("unreachable")

    def generate(self, batches: Sequence[Sequence[int]]) -> dict[int, Generated]:
        """Plain ``model.generate`` of every prompt, left-padded in ``batches``, a row to its stop or
        ``max_new_tokens``."""
        found: dict[int, Generated] = {}
        device = self.lm.device
        for batch in batches:
            prompts = [self.scorer.generation_prompt(self.items[i]) for i in batch]
            width = max(len(p) for p in prompts)
            ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, prompt in enumerate(prompts):
                ids[row, width - len(prompt):] = torch.tensor(prompt)
                mask[row, width - len(prompt):] = 1
            gaps = StepGaps()  # records (B,) per step; the scores pass through unchanged
            out = self.lm.model.generate(input_ids=ids.to(device), attention_mask=mask.to(device), do_sample=False,
                                         max_new_tokens=self.max_new, pad_token_id=self.pad_id,
                                         logits_processor=LogitsProcessorList([gaps]),
                                         stopping_criteria=StoppingCriteriaList([_Ended(self, batch, width)]))
            steps = gaps.stacked(len(batch))  # (B, steps)
            for row, i in enumerate(batch):
                found[self.items[i].example] = self.answer(i, out[row, width:].tolist(), steps[row])
        return found

    def _answered(self, index: int, tokens: list[int], gaps: list[float]) -> Generated:
        """:meth:`answer`, keeping the first condition's tokens of each item for :meth:`_draft`."""
        self._prior.setdefault(index, list(tokens))
        return self.answer(index, tokens, torch.tensor(gaps))

    def answer(self, index: int, tokens: list[int], gaps: torch.Tensor) -> Generated:
        """Item ``index``'s answer text and decision gap from its greedy tokens and per-step gaps."""
        example = self._example(index)
        text = self.scorer.stop(self.scorer.tokens.decode(tokens), example)
        decided = decided_steps(tokens, self.eos, self.scorer.tokens.decode,
                                lambda text: self.scorer.ended(text, example))
        return Generated(text, decision_gap(gaps, decided))


class _Ended(StoppingCriteria):
    """Plain ``generate``'s rows stop where the scorer's stop is reached (``Generation.ended``), not only at an
    end-of-sequence token: a batch ends when every row has."""

    def __init__(self, generation: Generation, batch: Sequence[int], width: int) -> None:
        self.generation, self.batch, self.width = generation, batch, width

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **_: object) -> torch.Tensor:
        return torch.tensor([self.generation.ended(index, input_ids[row, self.width:].tolist())
                             for row, index in enumerate(self.batch)], device=input_ids.device)
