"""A QuickFIX engine thread keeps one Python thread state for its life.

QuickFIX calls the application (fromApp, onLogon, toAdmin ...) from threads it started in C++. The
SWIG bindings wrap each call in PyGILState_Ensure/PyGILState_Release, and on a thread that Python
did not start, the Release that balances the Ensure deletes the thread state the Ensure created. So
every callback built a new thread state and, in CPython 3.11, a new frame stack: mmap'ed on the
first call of the callback, page-faulted in, munmap'ed on the way out (with a TLB shootdown across
the process's other threads). perf on the gateway at 4x8: about a sixth of its CPU went to those
mmap, munmap and page faults.

``keep_thread_state()``, called from a callback, takes one more PyGILState reference for the
calling thread and never gives it back: the thread's state, and its frame stack, stay for the
thread's life, and each later callback only takes and releases the GIL. Call it in the callbacks
of an engine that lives as long as its process (an acceptor, a bench or bot initiator); a thread
that ends keeps its state allocated (a few tens of KiB), so not in short-lived per-visitor engines.
"""

from __future__ import annotations

import ctypes
import threading

_ensure = ctypes.pythonapi.PyGILState_Ensure  # called with the GIL held: PyDLL keeps it
_ensure.argtypes = []
_ensure.restype = ctypes.c_int
_state = threading.local()  # lives in the thread state: gone with a state that is not kept


def keep_thread_state() -> None:
    """Keep the calling thread's Python state from now on (once per thread; cheap after that)."""
    if not getattr(_state, "kept", False):
        _ensure()
        _state.kept = True
