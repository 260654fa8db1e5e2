"""A Ctrl-C that is not lost on the way.

Python raises KeyboardInterrupt in whatever the main thread runs when SIGINT arrives. When
that is a weakref callback or a ``__del__`` -- an analysis churns them: fake tensors, their
caches -- the interpreter prints "Exception ignored in ..." and carries on, and the command
runs to its end as if Ctrl-C had not been pressed (2 of 10 interrupts of a long analysis
here, ``benchmarks/fit_host_band.py``). While a command runs (``remembered``), SIGINT's
handler remembers the interrupt as well as raising it, so the next ``check`` raises it
again: before a file is written (fxroof.files), between nodes of the cost pass, and when
the command returns. The interpreter's report of the swallowed one (a traceback) is left
out: the command ends as interrupted, which says it.

A library user's process keeps its own handler: nothing is installed on import, and
``check`` does nothing outside ``remembered``.
"""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import Iterator

_pressed = threading.Event()
_deferring = [0]  # how many deferred() blocks the main thread is inside


def _remember_and_raise(signum, frame) -> None:
    _pressed.set()
    if not _deferring[0]:
        raise KeyboardInterrupt


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Inside, a Ctrl-C is remembered but not raised where it lands, for code that C++ calls
    back into: recording a step, the dispatcher calls Python (torch's dispatch rules, the
    recorder's mode) from C++ that cannot pass an exception on, and a KeyboardInterrupt
    raised there ended the process by std::terminate (SIGABRT, "terminate called after
    throwing an instance of 'pybind11::error_already_set'"; 1 in 12 interrupts of a 12 s
    capture here; raised from the recorder's own dispatch hook instead, 5 in 12). The
    interrupt is raised by the next ``check`` after the block."""
    _deferring[0] += 1
    try:
        yield
    finally:
        _deferring[0] -= 1


@contextlib.contextmanager
def remembered() -> Iterator[None]:
    """Handle SIGINT by remembering it and raising KeyboardInterrupt, without the traceback
    of one the interpreter swallows, and put the handler and hook before back after (the
    main thread only: Python delivers signals there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous_hook = sys.unraisablehook

    def unreported_if_remembered(unraisable) -> None:
        if not (_pressed.is_set() and isinstance(unraisable.exc_value, KeyboardInterrupt)):
            previous_hook(unraisable)

    previous = signal.signal(signal.SIGINT, _remember_and_raise)
    sys.unraisablehook = unreported_if_remembered
    _pressed.clear()
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = previous_hook
        _pressed.clear()


def check() -> None:
    """Raise KeyboardInterrupt again if Ctrl-C came inside ``remembered``, wherever the first
    one went."""
    if _pressed.is_set():
        raise KeyboardInterrupt
