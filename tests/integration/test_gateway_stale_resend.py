"""An order resent with PossDupFlag=Y that was first sent before the gateway process started is
refused, not taken a second time (issue 13's fault suite: a gateway killed -9 after the order was
on the bus but before QuickFIX had stored that it received it; the client's engine resends it, and
its session ended at the restart)."""

from __future__ import annotations

import datetime as dt

import pytest

from shared.redis_server import RedisServer
from tests.gateway_stack import FixClient, fix_now, gateway_stack, order

pytestmark = pytest.mark.integration


def resent(clordid: str, orig: str) -> list[tuple[int, object]]:
    return [(43, "Y"), (122, orig), *order(clordid, 1, 1, "99.00")]


def test_a_resent_order_sent_before_the_restart_is_refused_a_later_one_taken(
        fresh_redis: RedisServer) -> None:
    before = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).strftime("%Y%m%d-%H:%M:%S.%f")[:-3]
    with gateway_stack(fresh_redis.url) as stack, FixClient(stack.fix_port, "CLIENT07") as c:
        c.send("D", resent("old", before))
        er = c.expect("8", lambda m: m.get(11) == "old")
        assert er[150] == "8" and "before the exchange restarted" in er[58], er
        # Sent (first) after this gateway started: an ordinary resend, taken as any order.
        c.send("D", resent("new", fix_now()))
        assert c.expect("8", lambda m: m.get(11) == "new")[150] == "0"
        c.send("D", order("plain", 1, 1, "99.00"))
        assert c.expect("8", lambda m: m.get(11) == "plain")[150] == "0"
