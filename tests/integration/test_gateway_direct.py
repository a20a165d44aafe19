"""A lone order takes the intake's shortcut (the engine thread publishes it, past the publisher
process) and is answered as any other; with the shortcut off the same orders take the pipe."""

from __future__ import annotations

import time

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
    # Slow writes in a row (FIXLAB_DIRECT_SLOW_US) rest the shortcut (unit-tested); a loaded CI machine
    # may take longer than the default 1 ms for one, so this test, about the route, sets it high.
    env = {"FIXLAB_DIRECT_IDLE_US": idle_us, "FIXLAB_DIRECT_SLOW_US": "10000000"}
    with gateway_stack(None, env=env) as stack, \
            FixClient(stack.fix_port, "CLIENT07") as c:
        # Records the gateway handed its publisher at start (the end of a trading day, say) keep the
        # shortcut off until the publisher reports them on the bus: lone orders come after that.
        logged_on = time.time()
        eventually(lambda: (h := health(stack)) and float(h["at"]) > logged_on and h["queue_depth"] == "0",
                   what="the gateway's pipe empty after the logon")
        c.send("D", order("d1", 1, 5, "99.00"))
        new = c.expect("8", lambda m: m.get(11) == "d1")
        assert (new[150], new[39]) == ("0", "0")
        # Lone: nothing for 10 ms before each (the shortcut asks 250 µs after the previous write ended;
        # a client answering a refusal at once can come within 100 µs of it, and take the pipe).
        time.sleep(0.01)
        c.send("D", order("d2", 1, 5, "99.005"))  # off the tick grid: refused where it is decided
        refused = c.expect("8", lambda m: m.get(11) == "d2")
        assert refused[150] == "8" and "ticks" in refused[58]
        time.sleep(0.01)
        c.send("F", [(41, "d1"), (11, "d3"), (55, "ACORN.LAB"), (54, 1), (60, "20260101-00:00:00")])
        assert c.expect("8", lambda m: m.get(11) == "d3")[150] == "4"
        counts = eventually(lambda: (h := health(stack)) and int(h.get("orders_in", 0)) == 3 and h,
                            what="the gateway's health report")
        taken = int(counts["direct"])
        assert taken == (3 if idle_us != "0" else 0), {k: v for k, v in counts.items() if "direct" in k}
        assert int(counts["refused"]) == 1
