"""Child processes that die with their parent, however the parent ends (kill -9 included).

Linux delivers a parent-death signal (``prctl(PR_SET_PDEATHSIG)``) to a child when the *thread* that
forked it exits, so a process started with ``preexec_fn=die_with_parent()`` must be started from a
thread that lives as long as the parent (the main thread). The setting survives ``execve``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1

_prctl: Callable[[int, int], int] | None = None
if sys.platform.startswith("linux"):
    _prctl = ctypes.CDLL(None, use_errno=True).prctl


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get ``sig`` when this process dies (None off Linux).

    Resolved here, in the parent, so the child only makes one foreign call between fork and exec.
    """
    prctl = _prctl
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, sig)
        if os.getppid() != parent:  # the parent died before the line above: nobody would tell us
            os.kill(os.getpid(), sig)

    return preexec
