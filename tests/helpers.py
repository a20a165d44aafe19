"""Test helpers: wait on a condition instead of sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(check: Callable[[], T], timeout: float = 10.0, interval: float = 0.02,
               what: str = "condition") -> T:
    """Call ``check`` until it returns a truthy value (returned) or raises nothing; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except AssertionError as exc:
            last_exc = exc
        if time.monotonic() > deadline:
            if last_exc is not None:
                raise AssertionError(f"{what} not met in {timeout}s: {last_exc}") from last_exc
            raise AssertionError(f"{what} not met in {timeout}s")
        time.sleep(interval)
