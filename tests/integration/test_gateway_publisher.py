"""The gateway's intake publisher process: killed with orders in its hands, it is replaced and every
order reaches the bus exactly once (the acceptor keeps each record until the publisher reports it
done; the new publisher skips what its predecessor had already published)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import redis

from benchmarks.fixload import children
from shared import streams
from shared.redis_server import RedisServer
from shared.schema import NewOrder, decode_batch
from tests.gateway_stack import FixClient, Stack, gateway_stack, matcher_available, order
from tests.helpers import eventually

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]


def publisher_pid(gateway_pid: int, not_pid: int = 0) -> int:
    """The gateway's publisher process (a child of any of its threads), other than ``not_pid``."""
    def find() -> int:
        for kid in children(gateway_pid):
            try:
                cmdline = Path(f"/proc/{kid}/cmdline").read_bytes()
            except OSError:
                continue
            if b"services.gateway.publisher" in cmdline and kid != not_pid:
                return kid
        return 0
    return eventually(find, timeout=20, what="the gateway's publisher process")


def health(stack: Stack) -> dict[str, str]:
    r = redis.Redis.from_url(stack.redis_url, decode_responses=True)
    return r.hgetall(streams.health_key("gateway", stack.gateway_id))  # type: ignore[return-value]


def clordids_on_the_bus(url: str) -> list[str]:
    r = redis.Redis.from_url(url)
    out: list[str] = []
    for key in r.scan_iter(match="fixlab:*:orders"):
        for _id, fields in r.xrange(key):  # type: ignore[union-attr]
            out += [c.clordid for c in decode_batch(fields[streams.BATCH_FIELD]) if isinstance(c, NewOrder)]
    return out


def news(c: FixClient, wanted: set[str], seen: dict[str, int], timeout_s: float = 30) -> None:
    """Read until every ClOrdID in ``wanted`` has its ExecutionReport New; count every New seen."""
    while not wanted <= seen.keys():
        m = c.expect("8", lambda m: m.get(150) in ("0", "8"), timeout_s=timeout_s)
        assert m[150] == "0", f"refused: {m.get(58)}"
        seen[m[11]] = seen.get(m[11], 0) + 1


def test_a_killed_publisher_is_replaced_and_no_order_is_lost_or_doubled(fresh_redis: RedisServer) -> None:
    # Progress reports every 30 s: the acceptor still holds every record when the publisher dies.
    env = {"FIXLAB_PUBLISHER_REPORT_S": "30"}
    # Redis is killed below: fsync every write, so the kill loses nothing (with the default, once a
    # second, the last second of orders could be lost with it: Redis's durability, not this test's).
    redis.Redis.from_url(fresh_redis.url).config_set("appendfsync", "always")
    with gateway_stack(fresh_redis.url, env=env) as stack, FixClient(stack.fix_port, "CLIENT09") as c:
        seen: dict[str, int] = {}
        first = publisher_pid(stack.gateway.pid)
        # 1. Orders just published, not yet reported done: the next publisher gets them all again
        # and must skip those its predecessor published.
        batch1 = [f"a{i}" for i in range(60)]
        for i, clordid in enumerate(batch1):
            c.send("D", order(clordid, 1 + i % 2, 1, "100.00"))
        news(c, {batch1[0]}, seen)
        os.kill(first, signal.SIGKILL)
        news(c, set(batch1), seen)
        second = publisher_pid(stack.gateway.pid, not_pid=first)
        # 2. Orders the publisher holds while Redis is down: killed, its successor publishes them.
        fresh_redis.kill()
        batch2 = [f"b{i}" for i in range(10)]
        for i, clordid in enumerate(batch2):
            c.send("D", order(clordid, 1 + i % 2, 1, "100.00"))
        # A TestRequest answered means the engine has handed every order before it to the publisher.
        c.send("1", [(112, "handed")])
        c.expect("0", lambda m: m.get(112) == "handed")
        os.kill(second, signal.SIGKILL)
        publisher_pid(stack.gateway.pid, not_pid=second)
        fresh_redis.start()
        news(c, set(batch2), seen)
        # Nothing is left in the acceptor's hands: everything it took is on the bus, once.
        eventually(lambda: health(stack).get("queue_depth") == "0", timeout=20, what="queue drained")
        on_bus = clordids_on_the_bus(stack.redis_url)
        assert sorted(on_bus) == sorted(batch1 + batch2)
        assert all(n == 1 for n in seen.values()), {k: n for k, n in seen.items() if n > 1}
        eventually(lambda: health(stack).get("publisher_restarts") == "2", timeout=20, what="2 restarts")
