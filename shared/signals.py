"""Stop a service on SIGINT or SIGTERM without taking a lock inside the signal handler.

A Python signal handler runs in the main thread between two bytecodes, possibly while that thread
holds a lock: ``threading.Event.set()`` in the handler then waits forever for the lock of the very
``Event.wait()`` it interrupted (seen as a runner stuck on a futex after SIGTERM). Here the handler
does nothing at all: ``signal.set_wakeup_fd`` writes the signal's number to a pipe at the C level, and
a thread of its own reads it and sets the Event, taking the lock like any other thread would.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _ignore(_signum: int, _frame: FrameType | None) -> None:
    """The handler proper: nothing (the wake-up fd carries the signal)."""


def stop_on_signals(stop: threading.Event, on_signal: Callable[[int], None] | None = None) -> None:
    """Set ``stop`` when SIGINT or SIGTERM arrives; call ``on_signal(signum)`` first (not in a handler).

    Call from the main thread (Python installs handlers only there), once per process.
    """
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    for sig in STOP_SIGNALS:
        signal.signal(sig, _ignore)

    def watch() -> None:
        while True:
            try:
                data = os.read(read_fd, 16)
            except InterruptedError:
                continue
            if not data:
                return
            for signum in data:
                if signum not in STOP_SIGNALS:
                    continue
                if on_signal is not None:
                    with contextlib.suppress(Exception):
                        on_signal(signum)
                stop.set()

    threading.Thread(target=watch, name="signals", daemon=True).start()
