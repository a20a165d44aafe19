"""The intake's light-load shortcut: which orders may take it, and what a Redis error does."""

from __future__ import annotations

import time
from decimal import Decimal

from services.gateway.direct import DirectIntake
from services.gateway.inbound import Inbound
from services.gateway.intake import Publisher
from services.gateway.resp import RespConnection
from shared.config import Instrument
from shared.redis_server import free_port

INSTS = [Instrument("ACORN.LAB", 10_000, Decimal("0.01"))]
NOS = ("8=FIX.4.4\x019=9\x0135=D\x0149=S\x0134=2\x0111=o1\x0155=ACORN.LAB\x0154=1\x0138=1\x0140=2"
       "\x0144=100.00\x01")


def direct(url: str, idle_s: float = 0.001) -> DirectIntake:
    publisher = Publisher(RespConnection(url, timeout_s=0.2), Inbound(INSTS, "gw"), INSTS, 1000, "")
    return DirectIntake(publisher, idle_s=idle_s, pause_s=5.0)


def test_only_an_order_after_a_quiet_spell_may_take_it() -> None:
    d = direct("redis://127.0.0.1:1/0", idle_s=0.001)
    assert d.quiet(10.0)  # the first order: nothing before it
    assert not d.quiet(10.0005)  # 0.5 ms after the last: a flood takes the pipe
    assert not d.quiet(10.0009)
    assert d.quiet(10.0030)  # 2.1 ms of quiet


def test_a_redis_error_sends_the_order_to_the_pipe_and_rests_the_shortcut() -> None:
    d = direct(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    now = time.monotonic()
    assert d.quiet(now)
    assert not d.publish(NOS)  # refused connection: the caller hands it to the pipe
    assert (d.published, d.fallbacks) == (0, 1)
    assert d.publisher._pending is None  # nothing kept for a retry: the pipe has it now
    assert not d.quiet(now + 1.0)  # quiet long enough, but the shortcut rests (5 s here)
    assert d.quiet(now + 10.0)


def test_slow_writes_in_a_row_rest_the_shortcut_and_quiet_counts_from_the_last_write(redis_url: str) -> None:
    # Redis with appendfsync always answers after an fdatasync (ms here): the engine thread must not
    # wait for one per order. slow_s=0 makes any real write "slow"; a huge one makes none slow.
    fast = direct(redis_url, idle_s=0.5)
    fast.slow_s = 60.0
    slow = direct(redis_url, idle_s=0.001)
    slow.slow_s = 0.0
    try:
        assert fast.quiet(time.monotonic()) and fast.publish(NOS)
        assert (fast.published, fast.slow) == (1, 0)
        # An order arriving right after the write (it waited in the socket meanwhile) is not "quiet".
        assert not fast.quiet(time.monotonic())

        # One slow write, or two, is a hiccup of a busy machine (a preempted writer): the shortcut
        # stays on. A fast write in between starts the count again.
        def order(n: int, at: float) -> None:
            assert slow.quiet(at) and slow.publish(NOS.replace("11=o1", f"11=s{n}"))

        order(1, time.monotonic() + 0.01)
        order(2, time.monotonic() + 0.01)
        assert (slow.published, slow.slow, slow.fallbacks) == (2, 2, 0)  # on the bus, but slow
        slow.slow_s = 60.0
        order(3, time.monotonic() + 0.01)  # fast
        slow.slow_s = 0.0
        order(4, time.monotonic() + 0.01)
        order(5, time.monotonic() + 0.01)
        assert (slow.published, slow.slow) == (5, 4)
        order(6, now := time.monotonic() + 0.01)  # the third slow write in a row
        assert (slow.published, slow.slow, slow.fallbacks) == (6, 5, 0)
        assert not slow.quiet(now + 1.0)  # rests (5 s here) though quiet long enough
        assert slow.quiet(now + 10.0)
    finally:
        fast.publisher.conn.close()  # type: ignore[attr-defined]
        slow.publisher.conn.close()  # type: ignore[attr-defined]
