"""Where an order's time goes: opt-in timestamps at each hop of its route (FIXLAB_HOPTRACE).

With ``FIXLAB_HOPTRACE=/some/prefix`` in its environment, every process that calls ``mark`` writes
``label monotonic_ns`` lines to ``/some/prefix.<pid>`` (CLOCK_MONOTONIC, the same clock in every
process of the machine, so marks of different processes compare). Unset, ``ON`` is False and a call
site costs one attribute test (``if hoptrace.ON: hoptrace.mark(...)``); nothing is opened.

The labels, in the order a lone order meets them (``python -m benchmarks.hops`` pairs them up):
- ``bench.sent``: the bench hands a NewOrderSingle to its engine;
- ``gateway.received``: the gateway's fromApp has a NewOrderSingle's text;
- ``bus.read``: a lean consumer's read returned entries (the matcher's, and the gateway's events);
- ``matcher.handled``: the matcher applied a batch and holds its events;
- ``bus.commit``: a lean consumer sends a handled batch's transaction (with its next read);
- ``gateway.report``: the events thread starts an Accepted's ExecutionReport;
- ``gateway.reported``: QuickFIX took it (sendToTarget returned);
- ``bench.answered``: the bench's fromApp has an ExecutionReport New.
Lines are buffered and written every ``FLUSH_EVERY`` marks and at exit: a process killed with
SIGKILL loses its last ones, which the pairing tolerates (it matches by time, not by count).
"""

from __future__ import annotations

import atexit
import os
import time
from typing import TextIO

ENV = "FIXLAB_HOPTRACE"
FLUSH_EVERY = 256

_prefix = os.environ.get(ENV, "")
ON = bool(_prefix)

_out: TextIO | None = None
_lines: list[str] = []


def mark(label: str) -> None:
    """Note that this process reached ``label`` now (call it only when ``ON``)."""
    _lines.append(f"{label} {time.perf_counter_ns()}\n")
    if len(_lines) >= FLUSH_EVERY:
        flush()


def flush() -> None:
    """Write the buffered marks to this process's file."""
    global _out
    if not _lines:
        return
    if _out is None:
        _out = open(f"{_prefix}.{os.getpid()}", "a", encoding="ascii")  # noqa: SIM115 (kept open)
    _out.write("".join(_lines))
    _out.flush()
    _lines.clear()


if ON:
    atexit.register(flush)
