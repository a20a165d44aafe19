"""The acceptor's handoff to a real publisher process and a real redis-server: a publisher kept off
the CPU (stopped here with SIGSTOP, as a busy machine deschedules it under a flood) fills its pipe;
the orders that do not fit wait in the acceptor, below FIXLAB_GATEWAY_QUEUE, and none is refused.
(A stressed fresh-clone run refused 550 of the intake bench's 20,000 orders as "exchange busy" with
a queue of 21,000: the full pipe, ~5,000 orders, was the bound, not the queue.)"""

from __future__ import annotations

import fcntl
import os
import signal
from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from benchmarks.fixload import encode_orders
from services.gateway.handoff import Handoff
from shared import streams
from shared.redis_server import RedisServer
from shared.schema import NewOrder, SessionEnded, decode_batch
from tests.helpers import eventually

pytestmark = pytest.mark.integration


def on_the_bus(url: str) -> list[str]:
    """The ClOrdIDs and session ends on the orders streams, in stream order."""
    r = redis.Redis.from_url(url)
    out: list[str] = []
    for key in sorted(r.scan_iter(match="fixlab:*:orders")):
        entries: Any = r.xrange(key)
        for _id, fields in entries:
            for c in decode_batch(fields[streams.BATCH_FIELD]):
                if isinstance(c, NewOrder):
                    out.append(c.clordid)
                elif isinstance(c, SessionEnded):
                    out.append(f"ended {c.session}")
    return out


def test_a_publisher_kept_off_the_cpu_costs_no_order_below_the_bound(fresh_redis: RedisServer) -> None:
    env = {**os.environ, "REDIS_URL": fresh_redis.url, "FIXLAB_GATEWAY_ID": "handoff",
           "FIXLAB_STREAM_MAXLEN": "1000000"}
    handoff = Handoff("run1", max_pending=1_000_000, env=env).start()
    try:
        proc = handoff._proc
        assert proc is not None and proc.stdin is not None
        pipe = fcntl.fcntl(proc.stdin.fileno(), fcntl.F_GETPIPE_SZ)
        now = datetime.now(UTC).strftime("%Y%m%d-%H:%M:%S.%f")[:-3]
        orders = encode_orders(1, 2, now)
        n = 3 * pipe // len(orders[0])  # three pipes' worth
        orders = encode_orders(n, 2, now)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            sent = [handoff.send(raw.decode()) for raw in orders]
            assert sent.count(False) == 0, f"{sent.count(False)} of {n} refused with the pipe full"
            assert handoff.waiting == n
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        handoff.send_command(SessionEnded("CLIENT01", "handoff", 1))  # never refused, after the orders
        eventually(lambda: handoff.waiting == 0, timeout=60, what="every record on the bus")
        assert (handoff.stats.published, handoff.stats.refused) == (n + 1, 0)
        assert on_the_bus(fresh_redis.url) == [f"i{i}" for i in range(n)] + ["ended CLIENT01"]
    finally:
        handoff.stop()
