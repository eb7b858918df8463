"""Training by gradient descent on the joint objective, with snapshots of the heads.

Each step's batch holds every (first, last, answer) combination of both tasks, weighted by its exact
probability (half the weight for each task), each with the same fresh filler sequences. The objective is
therefore exact over everything that carries information and unbiased over the fillers, which carry none;
A and B rows share their fillers, so fillers cannot be used to tell the tasks apart (or be memorised). The
loss that training reaches can be compared with :func:`headprune.synthetic.data.joint_optimum`.

The same settings must give the same outcome on every CPU, and CPUs round differently (AVX2 and AVX-512
kernels sum in other orders). The emergence of the features from small initialisation magnifies such
differences enormously (in some seeds a relative difference of 1e-13 in the initial weights grows to 1e-2 of
the trained ones), and at the edge of stability the growth never stops. So training computes in float64
(rounding differences near 1e-16 instead of 1e-7) from initial weights drawn by numpy (see
:func:`~headprune.synthetic.model.build_model`), with a step size that stays clear of that edge once the
features have emerged, decayed at the end so that the model settles at the optimum instead of wandering around
it. The first version's float32 steps of 0.5 sawtoothed at the edge of stability, and on another CPU ended
with other heads, or stuck before learning the last-symbol feature.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast

from headprune.synthetic.analysis import head_scores
from headprune.synthetic.data import SYMBOLS, Row, combinations, fillers
from headprune.synthetic.model import Architecture, build_model, build_tokenizer


@dataclass(frozen=True)
class Settings:
    """Everything that determines a run; the same settings and seed give the same model on any CPU.

    ``lr`` is the step size of plain gradient descent for all but the last ``decay_steps`` steps, which decay
    it (half a cosine) to ``final_lr``, so that training ends settled at the optimum instead of wandering
    around it. ``dtype`` is the precision training computes in; the model is returned in float32.
    """

    seed: int = 0
    middle: int = 3
    distractor_rate: float = 0.2
    steps: int = 6000
    lr: float = 0.03
    decay_steps: int = 2000
    final_lr: float = 0.003
    dtype: str = "float64"
    fillers_per_step: int = 16
    snapshot_every: int = 50
    architecture: Architecture = field(default_factory=Architecture)


@dataclass(frozen=True)
class Snapshot:
    """Losses of each task and each head's feature scores at one step of training."""

    step: int
    loss_a: float
    loss_b: float
    first: list[float]
    last: list[float]
    conflict: list[float]


@dataclass
class Trained:
    """A trained model, its tokenizer, its settings and its history."""

    model: GPT2LMHeadModel
    tokenizer: PreTrainedTokenizerFast
    settings: Settings
    history: list[Snapshot]
    seconds: float

    @property
    def final(self) -> Snapshot:
        return self.history[-1]

    def history_record(self) -> dict:
        return {"settings": asdict(self.settings), "seconds": self.seconds,
                "history": [asdict(snapshot) for snapshot in self.history]}


def weighted_rows(task: str, middles: list[tuple[str, ...]], distractor_rate: float
                  ) -> tuple[list[Row], list[float]]:
    """Every (first, last, answer) combination of ``task`` with each filler sequence, and its probability."""
    rows, weights = [], []
    for first, last, answer, weight in combinations(task, distractor_rate):
        for middle in middles:
            rows.append(Row((SYMBOLS[first], *middle, SYMBOLS[last]), answer))
            weights.append(weight / len(middles))
    return rows, weights


def encode(tokenizer: PreTrainedTokenizerFast, rows: list[Row]) -> torch.Tensor:
    """(rows, length) token ids of the prompts; every prompt has the same length."""
    return torch.tensor([tokenizer(row.prompt)["input_ids"] for row in rows])


def answer_ids(tokenizer: PreTrainedTokenizerFast) -> tuple[int, int]:
    a, b = tokenizer.convert_tokens_to_ids(list(SYMBOLS))
    return int(a), int(b)


def learning_rate(settings: Settings, step: int) -> float:
    """Step size at ``step``: ``lr`` until the last ``decay_steps`` steps, then a cosine decay reaching ``final_lr``
    at the last step."""
    decay = min(settings.decay_steps, settings.steps)
    into = step - (settings.steps - decay)
    if decay <= 0 or into < 0:
        return settings.lr
    fraction = into / max(decay - 1, 1)
    return settings.final_lr + 0.5 * (settings.lr - settings.final_lr) * (1 + math.cos(math.pi * fraction))


class _NoMLP(torch.nn.Module):
    """Stands in for the zeroed, frozen MLP during training: its output, exact zeros, without computing it.

    The residual plus zeros is the residual, and no gradient flows through zero weights, so training is the
    same to the last bit, and about a third faster (the MLP is four times as wide as the attention).
    """

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(hidden_states)


def train(settings: Settings, *, progress: bool = False) -> Trained:
    """Train the attention-only model on the joint objective from small random initialisation."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the model is tiny: more threads only add synchronisation
    try:
        return _train(settings, progress)
    finally:
        torch.set_num_threads(threads)


def _train(settings: Settings, progress: bool) -> Trained:
    tokenizer = build_tokenizer()
    model = build_model(settings.architecture, len(tokenizer), settings.seed).to(getattr(torch, settings.dtype))
    block = model.transformer.h[0]
    mlp, block.mlp = block.mlp, _NoMLP()
    answers = answer_ids(tokenizer)
    rng = np.random.default_rng(settings.seed)

    dtype = getattr(torch, settings.dtype)
    vocab = tokenizer.get_vocab()

    def batch(middles: list[tuple[str, ...]]) -> tuple[torch.Tensor, dict[str, tuple[torch.Tensor, torch.Tensor]]]:
        """Token ids of the inputs, and each task's targets and weights on them.

        A and B rows list the same inputs in the same order (every (first, last) with every filler sequence),
        so one forward pass serves both tasks.
        """
        targets = {}
        for task in ("A", "B"):
            rows, weights = weighted_rows(task, middles, settings.distractor_rate)
            targets[task] = (torch.tensor([answers[row.answer] for row in rows]), torch.tensor(weights, dtype=dtype))
        ids = torch.tensor([[vocab[word] for word in row.prompt.split()] for row in rows])  # = encode(B rows), faster
        return ids, targets

    def losses(data: tuple[torch.Tensor, dict[str, tuple[torch.Tensor, torch.Tensor]]]) -> dict[str, torch.Tensor]:
        ids, targets = data
        logits = model(input_ids=ids).logits[:, -1]  # (rows, vocab)
        return {task: (F.cross_entropy(logits, target, reduction="none") * weights).sum()
                for task, (target, weights) in targets.items()}

    measure = batch(fillers(64, np.random.default_rng(settings.seed + 1), settings.middle))  # fixed, for snapshots
    probe_rows, _ = weighted_rows("A", fillers(64, np.random.default_rng(settings.seed + 2), settings.middle),
                                  settings.distractor_rate)  # A: first and last independent and uniform
    probe_ids = encode(tokenizer, probe_rows)

    def snapshot(step: int) -> Snapshot:
        with torch.no_grad():
            current = losses(measure)
        scores = head_scores(model, probe_ids, probe_rows, answers)
        if progress:
            print(f"step {step:5d}  loss A {current['A']:.4f}  B {current['B']:.4f}", flush=True)
        return Snapshot(step, float(current["A"]), float(current["B"]), scores.first, scores.last, scores.conflict)

    optimiser = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=settings.lr)
    history: list[Snapshot] = []
    start = time.perf_counter()
    model.train()
    for step in range(settings.steps):
        if step % settings.snapshot_every == 0:
            history.append(snapshot(step))
        for group in optimiser.param_groups:
            group["lr"] = learning_rate(settings, step)
        optimiser.zero_grad()
        current = losses(batch(fillers(settings.fillers_per_step, rng, settings.middle)))
        (0.5 * (current["A"] + current["B"])).backward()  # the joint objective: equal parts A and B
        optimiser.step()
    block.mlp = mlp
    model.float()
    model.eval()
    history.append(snapshot(settings.steps))
    return Trained(model, tokenizer, settings, history, time.perf_counter() - start)


def accuracy(model: GPT2LMHeadModel, tokenizer: PreTrainedTokenizerFast, rows: list[Row],
             weights: list[float] | None = None) -> float:
    """(Weighted) share of rows whose answer symbol gets the higher logit."""
    a, b = answer_ids(tokenizer)
    with torch.no_grad():
        logits = model(input_ids=encode(tokenizer, rows)).logits[:, -1]
    picked = (logits[:, b] > logits[:, a]).long().numpy()
    right = picked == np.array([row.answer for row in rows])
    w = np.ones(len(rows)) if weights is None else np.array(weights)
    return float((right * w).sum() / w.sum())
