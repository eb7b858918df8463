"""Greedy decoding of a generating task's prompts, with how close each answer came to being otherwise.

Every example's generation prompt is decoded greedily, left-padded in the evaluator's batches, with the model's
own ``generate`` (its generation config's end-of-sequence tokens, the task's ``max_new_tokens``); the answer is
the text up to the scorer's stop (``Scorer.stop``) and its decision gap the smallest top-1 minus top-2 gap over
the steps that decided it (``headprune.evaluation.decoding``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import LogitsProcessorList

from headprune.evaluation.decoding import Generated, StepGaps, decided_steps, decision_gap, eos_ids
from headprune.models import LoadedModel
from headprune.scoring import Item, Scorer


class Generation:
    """Greedy decoding of ``items``' generation prompts for one model and scorer."""

    def __init__(self, lm: LoadedModel, scorer: Scorer, items: Sequence[Item], pad_id: int) -> None:
        self.lm = lm
        self.scorer = scorer
        self.items = items
        self.pad_id = pad_id

    def generate(self, batches: Sequence[Sequence[int]]) -> dict[int, Generated]:
        """Per example, the answer part of the greedy text and its decision gap (see :class:`Generated`)."""
        found: dict[int, Generated] = {}
        device = self.lm.device
        eos = eos_ids(self.lm.model)
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
                                         max_new_tokens=self.scorer.task.max_new_tokens, pad_token_id=self.pad_id,
                                         logits_processor=LogitsProcessorList([gaps]))
            steps = gaps.stacked(len(batch))  # (B, steps)
            for row, i in enumerate(batch):
                tokens = out[row, width:].tolist()
                found[self.items[i].example] = self.answer(tokens, steps[row], eos)
        return found

    def answer(self, tokens: list[int], gaps: torch.Tensor, eos: set[int]) -> Generated:
        """One example's answer text and decision gap from its greedy tokens and per-step gaps."""
        text = self.scorer.stop(self.scorer.tokens.decode(tokens))
        decided = decided_steps(tokens, eos, self.scorer.tokens.decode, self.scorer.stop)
        return Generated(text, decision_gap(gaps, decided))
