"""Windowing and lost-order accounting of one session's phase."""

from __future__ import annotations

import pytest

from services.bench.engine import bench_comp_ids
from services.bench.window import OrderWindow


def test_window_caps_unanswered_orders() -> None:
    w = OrderWindow(quota=10, window=3, base=100)
    taken = [w.take() for _ in range(5)]
    assert taken == [100, 101, 102, None, None]
    assert w.in_flight == 3
    for n in (100, 101, 102):
        w.stamp(n, 1_000)
    assert w.answer(101, 1_500, accepted=True)
    assert w.take() == 103
    assert w.take() is None


def test_quota_ends_sending_and_done_needs_every_answer() -> None:
    w = OrderWindow(quota=3, window=8)
    nums = [w.take() for _ in range(4)]
    assert nums == [0, 1, 2, None]
    for n in (0, 1):
        w.answer(n, 10, True)
    assert not w.done and w.lost == 1
    w.answer(2, 10, False)
    assert w.done and w.lost == 0
    assert (w.acknowledged, w.rejected) == (2, 1)


def test_latency_is_answer_time_minus_stamp() -> None:
    w = OrderWindow(quota=2, window=2)
    a, b = w.take(), w.take()
    assert a is not None and b is not None
    w.stamp(a, 1_000)
    w.stamp(b, 2_000)
    w.answer(b, 2_700, True)
    w.answer(a, 5_000, True)
    assert list(w.latencies_ns) == [700, 4_000]


def test_rejects_are_answers_without_a_latency() -> None:
    w = OrderWindow(quota=1, window=1)
    n = w.take()
    assert n is not None
    w.answer(n, 5, accepted=False)
    assert w.rejected == 1 and len(w.latencies_ns) == 0 and w.done


def test_duplicate_and_unknown_answers_are_counted_not_timed() -> None:
    w = OrderWindow(quota=5, window=2, base=10)
    n = w.take()
    assert n == 10
    w.stamp(n, 0)
    assert w.answer(10, 100, True)
    assert not w.answer(10, 200, True)  # a second ack of the same order
    assert not w.answer(11, 200, True)  # never sent yet
    assert not w.answer(9, 200, True)  # another phase's number
    assert w.duplicates == 1 and w.unknown == 2
    assert w.answered == 1 and list(w.latencies_ns) == [100]


def test_lost_orders_are_sent_minus_answered() -> None:
    w = OrderWindow(quota=100, window=4)
    for _ in range(4):
        w.take()
    w.answer(0, 1, True)
    w.answer(2, 1, True)
    # the window does not move past two unanswered orders for ever: lost when the phase ends
    assert w.lost == 2 and w.take() == 4 and w.take() == 5 and w.take() is None
    assert w.lost == 4 and w.sent == 6


def test_empty_quota_is_done_at_once() -> None:
    w = OrderWindow(quota=0, window=1)
    assert w.done and w.take() is None


def test_bad_window_arguments() -> None:
    with pytest.raises(ValueError):
        OrderWindow(quota=1, window=0)
    with pytest.raises(ValueError):
        OrderWindow(quota=-1, window=1)


def test_bench_comp_ids_stay_inside_the_pool() -> None:
    assert bench_comp_ids(1, 2) == ["BENCH001", "BENCH002"]
    assert bench_comp_ids(223, 2) == ["BENCH223", "BENCH224"]
    with pytest.raises(ValueError, match="outside the pool"):
        bench_comp_ids(224, 2)
    with pytest.raises(ValueError):
        bench_comp_ids(0, 1)
