"""Ctrl-C inside foreign code's callback into Python is kept, not dropped (``headprune.core.interrupts``)."""

from __future__ import annotations

import ctypes
import ctypes.util
import signal
import sys

import pytest

from headprune.core.interrupts import deferred_interrupt, interrupted, interruption_point

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="the C library's qsort, as Linux has it"),
              pytest.mark.usefixtures("ctrl_c_delivered")]


def _sort_calling_back(on_compare) -> list[int]:  # noqa: ANN001
    """Sort with the C library's qsort, whose comparisons call back into Python (as llama.cpp's log does)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    compare = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))

    def python_compare(a, b) -> int:  # noqa: ANN001
        on_compare()
        return a[0] - b[0]

    values = (ctypes.c_int * 5)(5, 1, 4, 2, 3)
    libc.qsort(values, len(values), ctypes.sizeof(ctypes.c_int), compare(python_compare))
    return list(values)


def _ctrl_c_once() -> object:
    pressed = []

    def press() -> None:
        if not pressed:
            pressed.append(True)
            signal.raise_signal(signal.SIGINT)

    return press


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the drop itself
def test_ctypes_drops_a_ctrl_c_raised_in_a_callback() -> None:
    """What the deferral is for: without it, the interrupt vanishes (the comparison it cut short counts as equal)
    and the call runs to its end."""
    assert sorted(_sort_calling_back(_ctrl_c_once())) == [1, 2, 3, 4, 5]


def test_a_ctrl_c_in_a_callback_is_raised_when_the_deferred_block_ends() -> None:
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupt():
            assert _sort_calling_back(_ctrl_c_once()) == [1, 2, 3, 4, 5]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler of before is back


def test_where_ctrl_c_is_ignored_it_stays_ignored_and_nothing_is_aborted() -> None:
    """A process told to ignore Ctrl-C (a shell's background job, nohup) keeps ignoring it inside a deferred block:
    no mark, so llama.cpp's abort check does not stop a call that nothing would then report as interrupted."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    asked = []
    with deferred_interrupt():
        assert _sort_calling_back(lambda: (signal.raise_signal(signal.SIGINT), asked.append(interrupted()))) == [
            1, 2, 3, 4, 5]
        interruption_point()
    assert asked and not any(asked) and signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_an_interruption_point_raises_it_between_foreign_calls() -> None:
    done = []
    with pytest.raises(KeyboardInterrupt):
        with deferred_interrupt():
            _sort_calling_back(_ctrl_c_once())
            interruption_point()
            done.append("after the point")
    assert done == []
