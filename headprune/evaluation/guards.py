"""What an evaluation refuses before it computes anything wrong: inputs the model cannot take, and a model whose
outputs are not numbers.

Both are bad input, named in one line: an example with no tokens to score from or longer than the model's
positions (a learned position table has no row for it; a rotary one was never trained on it), and a model whose
intact outputs hold NaN or infinity (broken or overflowing weights), which would otherwise be scored as if every
answer were simply wrong, and written into the results as NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from headprune.errors import TaskError, UnsupportedModelError
from headprune.scoring import Item
from headprune.tasks import Task

POSITION_ATTRS = ("max_position_embeddings", "n_positions", "n_ctx")


def model_positions(model: object) -> tuple[int, str] | None:
    """The number of positions the model's config declares, and the attribute that says so (``None``: none)."""
    config = getattr(model, "config", None)
    for name in POSITION_ATTRS:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, name
    return None


def too_long(model: object, task: Task, items: Sequence[Item], *, generates: bool) -> set[int]:
    """The examples (indices into ``task``) one of whose items needs more positions than the model has (its input,
    plus the tokens it may generate); none when the model declares no limit."""
    positions = model_positions(model)
    if positions is None:
        return set()
    extra = task.max_new_tokens if generates else 0
    return {item.example for item in items if len(item.tokens) + extra > positions[0]}


def check_lengths(model: object, task: Task, items: Sequence[Item], *, generates: bool) -> None:
    """Refuse, before any forward pass, an example that tokenises to nothing or that needs more positions than
    the model has (its input, plus the tokens it may generate).

    Raises:
        TaskError: naming the example, its length and the model's.
    """
    for item in items:
        if not item.tokens:
            example = task.examples[item.example]
            raise TaskError(f"task {task.name!r}, example {example.id}: its input is empty after tokenising (an empty "
                            "prompt?): a causal model needs at least one token to score from", settings=("task",))
    positions = model_positions(model)
    if positions is None or not items:
        return
    extra = task.max_new_tokens if generates else 0
    longest = max(items, key=lambda item: len(item.tokens))
    if len(longest.tokens) + extra > positions[0]:
        example = task.examples[longest.example]
        needs = f"{len(longest.tokens):,} tokens" + (f" plus {extra:,} to generate (max_new_tokens)" if extra else "")
        raise TaskError(f"task {task.name!r}, example {example.id}: {needs}, more than the model's {positions[0]:,} "
                        f"positions ({positions[1]})", settings=("task",))


def check_finite(name: str, task: Task, outputs: Sequence[torch.Tensor]) -> None:
    """Refuse a model whose intact outputs on ``task``'s first batch are not all finite.

    Raises:
        UnsupportedModelError
    """
    for output in outputs:
        if not bool(torch.isfinite(output).all()):
            what = "NaN" if bool(torch.isnan(output).any()) else "infinite values"
            raise UnsupportedModelError(f"{name}: the model's outputs hold {what} on the first batch of {task.name} "
                                        "with no head removed (broken or overflowing weights, or a dtype too narrow "
                                        "for them): nothing was scored")


__all__ = ["check_finite", "check_lengths", "model_positions", "too_long"]
