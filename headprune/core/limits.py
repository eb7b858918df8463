"""Limits on the work a command takes on, and numbers read from the environment, checked before any work starts.

Bad input must be refused with one line before it costs anything: a task file is read only when it is a regular
file of bounded size with bounded lines (a FIFO or a device would block or never end), a plan whose size exceeds a
limit is refused with its estimate, and a number in an environment variable that is not a number is named, not
turned into an internal error when a module happens to read it. Each limit has a default and an environment
variable that raises it.
"""

from __future__ import annotations

import os

from headprune.core.choices import SANDBOX_MODES
from headprune.errors import HeadpruneError, SettingsError

# name -> (default, what it bounds): `headprune` refuses work beyond these before starting it.
LIMITS: dict[str, tuple[int, str]] = {
    "HEADPRUNE_MAX_TASK_MB": (1024, "the size of a task file, in MB"),
    "HEADPRUNE_MAX_LINE_CHARS": (1_000_000, "the length of one line of a task file, in characters"),
    "HEADPRUNE_MAX_EXAMPLES": (10_000_000, "the examples of one task"),
    "HEADPRUNE_MAX_NEW_TOKENS": (4096, "the tokens a generating task may decode per example"),
    "HEADPRUNE_MAX_SETS": (200_000, "the head sets find's joint search evaluates"),
}


# Other numbers read from the environment: name -> (default, minimum, maximum, whole number).
NUMBERS: dict[str, tuple[float, float, float, bool]] = {
    "HEADPRUNE_LAYER_CACHE_MB": (2048, 0, 2**40, True),
    "HEADPRUNE_DIST_TIMEOUT_MIN": (120, 0.01, 10**7, False),  # ten million minutes: 19 years
}


# Words read from the environment: name -> the values it takes (the first is the default).
WORDS: dict[str, tuple[str, ...]] = {
    "HEADPRUNE_CPU_LINEAR": ("auto", "onednn", "torch"),
    "HEADPRUNE_SANDBOX_MODE": SANDBOX_MODES,  # --sandbox-mode's default (headprune.scoring.execution)
}


def check_environment() -> None:
    """Read every number headprune takes from the environment once, so that a bad one is refused before any work,
    not when the module that needs it first runs.

    Raises:
        SettingsError: naming the variable.
    """
    for name in LIMITS:
        limit(name)
    for name in NUMBERS:
        number(name)
    for name in WORDS:
        word(name)


def word(name: str) -> str:
    """The value of one of :data:`WORDS` (its environment variable, lower case, or its default).

    Raises:
        SettingsError: a value it does not take.
    """
    choices = WORDS[name]
    wanted = os.environ.get(name, "").strip().lower() or choices[0]
    if wanted not in choices:
        raise SettingsError(f"{name}={os.environ[name][:40]!r}: use one of {', '.join(choices)}")
    return wanted


def number(name: str) -> float:
    """The current value of one of :data:`NUMBERS` (its environment variable, or its default).

    Raises:
        SettingsError: the variable is not a number of the right kind, or is below its minimum.
    """
    default, minimum, maximum, integer = NUMBERS[name]
    return env_number(name, default, minimum=minimum, maximum=maximum, integer=integer)


def env_number(name: str, default: float, *, minimum: float = 0, maximum: float = float("inf"),
               integer: bool = True) -> float:
    """The number in environment variable ``name`` (``default`` when unset or empty).

    Raises:
        SettingsError: the value is not a finite number of the right kind, or is outside ``minimum..maximum``.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if integer else float(raw)
    except ValueError:
        raise SettingsError(f"environment variable {name}={raw[:40]!r} is not {'an integer' if integer else 'a number'}"
                            ) from None
    if not minimum <= value < float("inf"):
        raise SettingsError(f"environment variable {name}={raw[:40]!r} must be at least {_shown(minimum)}")
    if value > maximum:
        raise SettingsError(f"environment variable {name}={raw[:40]!r} must be at most {_shown(maximum)}")
    return value


def _shown(number: float) -> str:
    return f"{int(number):,}" if float(number).is_integer() else f"{number:g}"


def limit(name: str) -> int:
    """The current value of one of :data:`LIMITS` (its environment variable, or its default).

    Raises:
        SettingsError: the environment variable is not a positive integer.
    """
    default, _ = LIMITS[name]
    return int(env_number(name, default, minimum=1))


def check_limit(what: str, estimate: int, name: str, *, error: type[HeadpruneError] = SettingsError,
                settings: tuple[str, ...] = ()) -> None:
    """Refuse ``estimate`` units of ``what`` when it exceeds limit ``name``, saying the estimate and how to raise it.

    Raises:
        ``error`` (a :class:`SettingsError` by default), naming ``settings``.
    """
    allowed = limit(name)
    if estimate <= allowed:
        return
    shown = f"{estimate:,}" if estimate < 10**15 else f"about {float(estimate):.2g}"
    raise error(f"{what}: {shown}, more than the limit of {allowed:,} ({LIMITS[name][1]}; raise it with {name}=N)",
                settings=settings)


__all__ = ["LIMITS", "NUMBERS", "WORDS", "check_environment", "check_limit", "env_number", "limit", "number",
           "word"]
