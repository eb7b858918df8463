"""A tiny Llama built by hand with one deliberately harmful head, and its tasks.

Residual stream of 16 dims, one layer of 4 heads (head_dim 4), MLP switched off. Each prompt is a single
token ``x{c}_{k}`` whose embedding is ``s * c * e0 + n_k * e1``: ``c = +-1`` is the cue that decides the
answer, ``n_k`` a per-token nuisance value. The unembedding reads ``(e0 + w * e1)`` for `` A`` and the
negative for `` B``, so the model answers by the sign of ``c * s + w * n_k``: right unless the nuisance is
large and of the other sign. Head L0.H0 copies the (normalised) cue and writes it back *negated*: it pushes
every example towards the wrong answer, more so where the nuisance is small. Removing it can only rescue
examples, never damage them. Heads H1..H3 write nothing (zero output projection), unless ``passengers`` asks
for heads that do the same as H0 at a much smaller strength (see ``build_model``).

``cue_task`` labels by the cue (the head hurts it); ``reversed_task`` labels the opposite way, so the
harmful head helps it: the control on which find must show the cost.
"""

from __future__ import annotations

import random

import torch

from headprune.loading.models import wrap_model
from headprune.tasks import Example, Task
from headprune.testing import cue_llama

TOKENS_PER_CUE = 500
HARM = 0.2


# Passenger heads for the parsimony test: H1 so weak that removing it only shifts margins (it flips no answer
# of cue_task), H2 just strong enough that removing it on top of H0 rescues a couple of examples by luck of
# where they lie (a gain of +1 or +2 on a 300-example discovery set, which no test at 5% supports).
PASSENGERS = {1: 0.001, 2: 0.02}


def build_model(seed: int = 0, passengers: dict[int, float] | None = None, harm: float = HARM,
                tokens_per_cue: int = TOKENS_PER_CUE, kv_heads: int | None = None):  # noqa: ANN201
    """The hand-made model as a LoadedModel (a real LlamaForCausalLM with set weights: ``headprune.testing``'s cue
    model with four heads).

    ``passengers`` maps a head index (1..3) to a strength: that head writes the cue back negated like H0,
    ``strength`` times the cue instead of ``harm`` times. ``tokens_per_cue`` sets the vocabulary (tasks
    built with the same value have ``2 * tokens_per_cue`` examples). ``kv_heads``: key/value heads the four query
    heads share (2: H0 and H1 share the first; H1 writes nothing all the same).
    """
    model, tokenizer = cue_llama(4, tokens_per_cue, torch.Generator().manual_seed(seed), kv_heads)
    with torch.no_grad():
        head = model.model.layers[0].self_attn
        head.v_proj.weight[0, 0] = 1.0  # head 0, value dim 0 <- normalised cue
        head.o_proj.weight[0, 0] = -harm  # written back negated into the cue direction
        for index, strength in (passengers or {}).items():
            head.v_proj.weight[4 * index, 0] = 1.0
            head.o_proj.weight[0, 4 * index] = -strength
    return wrap_model(model, tokenizer, name="handmade-harmful-head")


def _examples(label_of, seed: int | None = None, tokens_per_cue: int = TOKENS_PER_CUE,  # noqa: ANN001
              flip: float = 0.0) -> tuple[Example, ...]:
    rng = random.Random(seed)
    examples = []
    for k in range(tokens_per_cue):
        for c, name in ((1, "p"), (-1, "n")):
            answer = rng.randrange(2) if label_of is None else label_of(c)
            if flip and rng.random() < flip:  # label noise: this example's answer is the other one
                answer = 1 - answer
            examples.append(Example(f"x{name}_{k}", prompt=f"x{name}_{k}", choices=(" A", " B"), answer=answer))
    return tuple(examples)


def cue_task(tokens_per_cue: int = TOKENS_PER_CUE, flip: float = 0.0, seed: int = 0) -> Task:
    """Labelled by the cue; ``flip`` > 0 gives each label that chance of being the other one (seeded)."""
    name = "cue" if not flip else f"cue-flip{flip:g}-{seed}"
    return Task(name, "choice", _examples(lambda c: 0 if c > 0 else 1, seed, tokens_per_cue, flip))


def reversed_task() -> Task:
    return Task("reversed-cue", "choice", _examples(lambda c: 1 if c > 0 else 0))


def random_label_task(seed: int, tokens_per_cue: int = TOKENS_PER_CUE) -> Task:
    """Labels drawn at random, independent of the model: a null task."""
    return Task(f"random-labels-{seed}", "choice", _examples(None, seed, tokens_per_cue))
