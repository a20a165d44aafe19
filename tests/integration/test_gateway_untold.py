"""After a gateway kill -9, a client that logs on again is told what the start-up sweep cancelled: an
unsolicited Canceled ExecutionReport per swept order, in its own version, once (issue 25)."""

from __future__ import annotations

import signal

import pytest
import redis

from shared import streams
from shared.redis_server import RedisServer
from tests.gateway_stack import FixClient, gateway_stack, matcher_available, order
from tests.helpers import eventually

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]


def test_the_sweeps_cancels_are_told_at_the_next_logon_once(fresh_redis: RedisServer) -> None:
    r = redis.Redis.from_url(fresh_redis.url)
    with gateway_stack(fresh_redis.url) as first, FixClient(first.fix_port, "CLIENT05") as c44, \
                FixClient(first.fix_port, "CLIENT42-05", begin="FIX.4.2") as c42:
        for clordid in ("u44-1", "u44-2"):
            c44.send("D", order(clordid, 1, 3, "91.00"))
            c44.expect("8", lambda m, k=clordid: m.get(11) == k)  # type: ignore[misc]
        c42.send("D", [(21, 1), *order("u42-1", 2, 2, "109.00")])
        c42.expect("8", lambda m: m.get(11) == "u42-1")
        first.gateway.send_signal(signal.SIGKILL)  # no Logout, nothing ends: the orders rest
        first.gateway.wait(10)
    with gateway_stack(fresh_redis.url) as second:
        # The new gateway's sweep cancels them; nobody is logged on: each is kept for its session.
        eventually(lambda: r.llen(streams.untold_key(second.gateway_id, "CLIENT05")) == 2
                   and r.llen(streams.untold_key(second.gateway_id, "CLIENT42-05")) == 1,
                   timeout=20, what="the sweep's Cancelled kept")
        with FixClient(second.fix_port, "CLIENT05") as c44:
            told = [c44.expect("8", lambda m, k=k: m.get(11) == k and m.get(150) == "4")  # type: ignore[misc]
                    for k in ("u44-1", "u44-2")]
            assert all(m[39] == "4" and m[58] == "session ended" and m[151] == "0" for m in told)
            c44.logout()
        with FixClient(second.fix_port, "CLIENT42-05", begin="FIX.4.2") as c42:
            m = c42.expect("8", lambda m: m.get(11) == "u42-1")
            assert (m[150], m[39], m[20]) == ("4", "4", "0")  # FIX 4.2's dialect: ExecTransType New
            c42.logout()
        assert r.exists(streams.untold_key(second.gateway_id, "CLIENT05")) == 0
        # Once: the next Logon hears nothing of them.
        with FixClient(second.fix_port, "CLIENT05") as c44:
            c44.send("D", order("u44-3", 1, 1, "91.00"))
            c44.expect("8", lambda m: m.get(11) == "u44-3")
            assert [m for m in c44.received if m.get(35) == "8" and m.get(11) != "u44-3"] == []
