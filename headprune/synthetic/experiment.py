"""One seed of the experiment, end to end: train, save, analyse, ``find`` on task B with A as control, export.

The model and the tasks are written as ordinary artefacts (a GPT-2 checkpoint folder and two JSONL choice
tasks), and ``find`` and ``export`` are headprune's own, called exactly as the CLI calls them; the record
says which heads the analysis named and which ``find`` returned, so the two can be compared.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from headprune.core.io import atomic_folder, atomic_write_json
from headprune.core.record_json import to_json
from headprune.exporter.pipeline import export
from headprune.report.markdown import write_outputs
from headprune.search.find import find
from headprune.synthetic.analysis import HeadScores
from headprune.synthetic.data import fillers, joint_optimum, sample, write_task
from headprune.synthetic.train import Settings, Trained, accuracy, train, weighted_rows


@dataclass(frozen=True)
class Protocol:
    """Sizes of the task files and of find's search (small: the model has one layer of a few heads)."""

    examples: int = 1000
    discovery: int = 300
    heldout: int = 600
    nominees: int = 4
    max_heads: int = 2
    finalists: int = 3


def save_trained(trained: Trained, folder: Path, protocol: Protocol) -> None:
    """Write the checkpoint (``model/``), the two tasks (``task_a.jsonl``, ``task_b.jsonl``) and the history."""
    settings = trained.settings
    rng = np.random.default_rng(10_000 + settings.seed)  # the tasks' own stream, apart from training
    with atomic_folder(folder / "model", replace=True) as staging:
        trained.model.save_pretrained(staging)
        trained.tokenizer.save_pretrained(staging)
    for task, name in (("A", "task_a"), ("B", "task_b")):
        rows = sample(task, protocol.examples, rng, middle=settings.middle, distractor_rate=settings.distractor_rate)
        write_task(folder / f"{name}.jsonl", rows, name)
    atomic_write_json(folder / "history.json", trained.history_record())


def emergence_step(trained: Trained, heads: list[int], share: float = 0.8) -> int | None:
    """First snapshot step from which ``heads`` hold ``share`` of the positive conflict score to the end."""
    step = None
    for snapshot in trained.history:
        held = HeadScores(snapshot.first, snapshot.last, snapshot.conflict).conflict_share(heads)
        step = (step if step is not None else snapshot.step) if held >= share else None
    return step


def commands(folder: Path, protocol: Protocol, seed: int) -> list[str]:
    """The CLI commands equivalent to what :func:`run_seed` does after training."""
    q = shlex.quote
    return [f"headprune find {q(str(folder / 'model'))} --task {q(str(folder / 'task_b.jsonl'))} "
            f"--control {q(str(folder / 'task_a.jsonl'))} --control-limit {protocol.heldout} "
            f"--discovery {protocol.discovery} --heldout {protocol.heldout} --nominees {protocol.nominees} "
            f"--max-heads {protocol.max_heads} --finalists {protocol.finalists} --seed {seed} "
            f"--out {q(str(folder / 'find'))}",
            f"headprune export {q(str(folder / 'model'))} --heads {q(str(folder / 'find' / 'result.json'))} "
            f"--out {q(str(folder / 'pruned'))}"]


def run_seed(settings: Settings, folder: Path, protocol: Protocol = Protocol(), *, progress: bool = False,
             trained: Trained | None = None) -> dict:
    """Train one seed and put ``find`` to the test against the analysis; returns the seed's record.

    Args:
        trained: the model ``train(settings)`` returns, trained before (the test suite keeps them); trained here
            when not given.
    """
    trained = trained or train(settings, progress=progress)
    save_trained(trained, folder, protocol)
    final = trained.final
    scores = HeadScores(final.first, final.last, final.conflict)
    named = scores.conflict_heads()

    model = str(folder / "model")
    result = find(model, str(folder / "task_b.jsonl"), control=str(folder / "task_a.jsonl"),
                  control_limit=protocol.heldout, discovery=protocol.discovery, heldout=protocol.heldout,
                  nominees=protocol.nominees, max_heads=protocol.max_heads, finalists=protocol.finalists,
                  seed=settings.seed, out=folder / "find", progress=progress, overwrite=True)  # the seed's own
    write_outputs(result, folder / "find")
    exported = export(model, result, out=folder / "pruned", overwrite=True) if result.confirmed else None

    found = [head.head for head in result.primary]
    optimum = joint_optimum(settings.distractor_rate)
    middles = fillers(256, np.random.default_rng(20_000 + settings.seed), settings.middle)
    rows_a, weights_a = weighted_rows("A", middles, settings.distractor_rate)
    rows_b, weights_b = weighted_rows("B", middles, settings.distractor_rate)
    primary = result.finalists[0]
    return {
        "seed": settings.seed,
        "settings": asdict(settings),
        "train_seconds": round(trained.seconds, 2),
        "loss": {"A": final.loss_a, "B": final.loss_b, "joint": (final.loss_a + final.loss_b) / 2},
        "optimum": asdict(optimum) | {"joint": (optimum.loss_a + optimum.loss_b) / 2},
        "accuracy": {"A": accuracy(trained.model, trained.tokenizer, rows_a, weights_a),
                     "B": accuracy(trained.model, trained.tokenizer, rows_b, weights_b)},
        "scores": asdict(scores),
        "conflict_heads": named,
        "conflict_share_top": scores.conflict_share(named[:1]),
        "emergence_step": emergence_step(trained, named),
        "found_heads": found,
        "found_contains_named": set(named) <= set(found),
        "heldout_b": to_json(primary.heldout),
        "control_a": to_json(primary.controls[0]),
        "exported": None if exported is None else {"folder": str(folder / "pruned"),
                                                    "verification": to_json(exported.verification)},
        "commands": commands(folder, protocol, settings.seed),
    }
