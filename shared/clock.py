"""Wall and monotonic time in nanoseconds: the services' clock (the matcher core never reads one)."""

from __future__ import annotations

import time


def now_ns() -> int:
    return time.time_ns()


def mono_ns() -> int:
    return time.perf_counter_ns()
