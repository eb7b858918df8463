"""Ctrl-C while foreign code runs: kept, and honoured as soon as that code returns.

Python runs a signal's handler between two bytecodes of the main thread, and that may be inside a ctypes callback:
llama.cpp calls back into Python for every line it logs, while it loads a file or decodes. A ``KeyboardInterrupt``
raised there is printed and dropped by ctypes ("Exception ignored on calling ctypes callback function"), and the run
goes on to the end, moving its output into place. Inside :func:`deferred_interrupt` a SIGINT only marks itself;
:func:`interruption_point` (called between the foreign calls, each well under a second) and the block's end deliver
it again to the handler that was there before, which raises ``KeyboardInterrupt`` as usual.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_pending: list[int] = []  # SIGINTs received inside a deferred block, not yet delivered
_depth = 0


def _mark(signum: int, frame: object) -> None:  # noqa: ARG001 - the signal module's signature
    _pending.append(signum)


@contextmanager
def deferred_interrupt() -> Iterator[None]:
    """A block of foreign calls whose callbacks must not swallow Ctrl-C (see the module). Outside the main thread,
    where Python delivers no signal, it does nothing."""
    global _depth
    if threading.current_thread() is not threading.main_thread() or _depth:
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


def interruption_point() -> None:
    """Deliver a Ctrl-C received in the enclosing :func:`deferred_interrupt` block now (between foreign calls)."""
    if _pending and _depth:
        del _pending[:]
        raise KeyboardInterrupt


__all__ = ["deferred_interrupt", "interruption_point"]
