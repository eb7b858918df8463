"""Training by gradient descent on the joint objective, with snapshots of the heads.

Each step's batch holds every (first, last, answer) combination of both tasks, weighted by its exact
probability (half the weight for each task), each with the same fresh filler sequences. The objective is
therefore exact over everything that carries information and unbiased over the fillers, which carry none;
A and B rows share their fillers, so fillers cannot be used to tell the tasks apart (or be memorised). The
loss that training reaches can be compared with :func:`headprune.synthetic.data.joint_optimum`.
"""

from __future__ import annotations

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
    """Everything that determines a run; the same settings and seed give the same model."""

    seed: int = 0
    middle: int = 3
    distractor_rate: float = 0.2
    steps: int = 1500
    lr: float = 0.5
    fillers_per_step: int = 16
    snapshot_every: int = 25
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
    model = build_model(settings.architecture, len(tokenizer), settings.seed)
    answers = answer_ids(tokenizer)
    rng = np.random.default_rng(settings.seed)

    def batch(middles: list[tuple[str, ...]]) -> dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        out = {}
        for task in ("A", "B"):
            rows, weights = weighted_rows(task, middles, settings.distractor_rate)
            out[task] = (encode(tokenizer, rows), torch.tensor([answers[row.answer] for row in rows]),
                         torch.tensor(weights))
        return out

    def losses(data: dict) -> dict[str, torch.Tensor]:
        out = {}
        for task, (ids, targets, weights) in data.items():
            logits = model(input_ids=ids).logits[:, -1]  # (rows, vocab)
            out[task] = (F.cross_entropy(logits, targets, reduction="none") * weights).sum()
        return out

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
        optimiser.zero_grad()
        current = losses(batch(fillers(settings.fillers_per_step, rng, settings.middle)))
        (0.5 * (current["A"] + current["B"])).backward()  # the joint objective: equal parts A and B
        optimiser.step()
    history.append(snapshot(settings.steps))
    model.eval()
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
