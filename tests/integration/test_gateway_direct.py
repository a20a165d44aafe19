"""A lone order takes the intake's shortcut (the engine thread publishes it, past the publisher
process) and is answered as any other; with the shortcut off the same orders take the pipe."""

from __future__ import annotations

import pytest
import redis

from shared import streams
from tests.gateway_stack import FixClient, Stack, gateway_stack, matcher_available, order
from tests.helpers import eventually

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]


def health(stack: Stack) -> dict[str, str]:
    r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    try:
        return r.hgetall(streams.health_key("gateway", stack.gateway_id))  # type: ignore[return-value]
    finally:
        r.close()


@pytest.mark.parametrize("idle_us", ["250", "0"])
def test_lone_orders_and_refusals_are_answered_by_either_route(idle_us: str) -> None:
    with gateway_stack(None, env={"FIXLAB_DIRECT_IDLE_US": idle_us}) as stack, \
            FixClient(stack.fix_port, "CLIENT07") as c:
        c.send("D", order("d1", 1, 5, "99.00"))
        new = c.expect("8", lambda m: m.get(11) == "d1")
        assert (new[150], new[39]) == ("0", "0")
        c.send("D", order("d2", 1, 5, "99.005"))  # off the tick grid: refused where it is decided
        refused = c.expect("8", lambda m: m.get(11) == "d2")
        assert refused[150] == "8" and "ticks" in refused[58]
        c.send("F", [(41, "d1"), (11, "d3"), (55, "ACORN.LAB"), (54, 1), (60, "20260101-00:00:00")])
        assert c.expect("8", lambda m: m.get(11) == "d3")[150] == "4"
        counts = eventually(lambda: (h := health(stack)) and int(h.get("orders_in", 0)) == 3 and h,
                            what="the gateway's health report")
        taken = int(counts["direct"])
        assert taken == (3 if idle_us != "0" else 0)
        assert int(counts["refused"]) == 1
