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
