"""The order token bucket and the page counter."""

from __future__ import annotations

import pytest

from services.web.limits import PageLimiter, TokenBucket


def test_bucket_allows_burst_then_rate() -> None:
    b = TokenBucket(burst=5, rate=2.0)
    assert [b.take(0.0) for _ in range(5)] == [0.0] * 5
    wait = b.take(0.0)
    assert wait == pytest.approx(0.5)
    assert b.take(0.5) == 0.0  # one token came back after half a second
    assert b.take(0.5) > 0
    assert b.take(1.0) == 0.0


def test_bucket_refills_to_burst_only() -> None:
    b = TokenBucket(burst=5, rate=2.0)
    for _ in range(5):
        b.take(0.0)
    assert sum(1 for _ in range(10) if b.take(100.0) == 0.0) == 5


def test_bucket_ignores_time_going_backwards() -> None:
    b = TokenBucket(burst=1, rate=1.0)
    assert b.take(10.0) == 0.0
    assert b.take(5.0) > 0


def test_pages_per_address_and_total() -> None:
    lim = PageLimiter(per_address=2, total=3)
    assert lim.admit("a") is None and lim.admit("a") is None
    third = lim.admit("a")
    assert third is not None and "2 lab pages" in third
    assert lim.admit("b") is None
    full = lim.admit("c")
    assert full is not None and "full" in full
    lim.release("a")
    assert lim.admit("c") is None
    assert lim.open_pages == 3
    lim.release("a")
    lim.release("b")
    lim.release("c")
    assert lim.open_pages == 0 and not lim.by_address
