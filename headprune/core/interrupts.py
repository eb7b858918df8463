"""Ctrl-C while foreign code runs: kept, honoured as soon as that code returns, and asked for by long calls.

Python runs a signal's handler between two bytecodes of the main thread, and that may be inside a ctypes callback:
llama.cpp calls back into Python for every line it logs, from any of its functions. A ``KeyboardInterrupt`` raised
there is printed and dropped by ctypes ("Exception ignored on calling ctypes callback function"), and the run goes on
to the end, moving its output into place. Inside :func:`deferred_interrupt` a SIGINT only marks itself; the block's
end delivers it again to the handler that was there before, which raises ``KeyboardInterrupt`` as usual.
:func:`deferring` makes every call of a foreign library such a block (``headprune.exporter.llama_cpp.binding`` wraps
each llama.cpp function). A single call can run for seconds (a decode of 512 tokens of a large vocabulary); the
library's own abort check (llama.cpp's ``abort_callback``, called on the calling thread between two nodes of its
graph) returns :func:`interrupted`, so the call stops early and the Ctrl-C is raised when it returns.
"""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_pending: list[int] = []  # SIGINTs received inside a deferred block, not yet delivered
_depth = 0


def _mark(signum: int, frame: object) -> None:  # noqa: ARG001 - the signal module's signature
    _pending.append(signum)


@contextmanager
def deferred_interrupt() -> Iterator[None]:
    """A block of foreign calls whose callbacks must not swallow Ctrl-C (see the module). Outside the main thread,
    where Python delivers no signal, it does nothing; nor where Ctrl-C is ignored (a shell's background job, nohup),
    which must stay so: a mark there would abort llama.cpp's call with nothing raised afterwards."""
    global _depth
    if (threading.current_thread() is not threading.main_thread() or _depth
            or signal.getsignal(signal.SIGINT) is signal.SIG_IGN):
        yield
        return
    previous = signal.signal(signal.SIGINT, _mark)
    _depth = 1
    try:
        yield
    finally:
        _depth = 0
        signal.signal(signal.SIGINT, previous)
        if _pending:
            del _pending[:]
            signal.raise_signal(signal.SIGINT)  # now to the handler of before: KeyboardInterrupt, by default


def deferring(function: F) -> F:
    """``function`` (a foreign library's) called inside a :func:`deferred_interrupt` block each time."""

    @functools.wraps(function)
    def call(*args: Any, **kwargs: Any) -> Any:
        with deferred_interrupt():
            return function(*args, **kwargs)

    return call  # type: ignore[return-value]


def interrupted() -> bool:
    """Whether a Ctrl-C waits in the enclosing deferred block: what a foreign call's abort check answers, on the main
    thread (where Python runs the signal's handler first, marking it)."""
    return bool(_pending) and _depth > 0


def interruption_point() -> None:
    """Deliver a Ctrl-C received in the enclosing :func:`deferred_interrupt` block now (between foreign calls)."""
    if _pending and _depth:
        del _pending[:]
        raise KeyboardInterrupt


__all__ = ["deferred_interrupt", "deferring", "interrupted", "interruption_point"]
