"""One matcher per shard: the lease in Redis, against a real redis-server."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

from services.matcher.config import load
from services.matcher.lease import Lease
from services.matcher.service import MatcherService
from shared import bus, streams
from shared.schema import NewOrder
from tests.helpers import eventually

pytestmark = pytest.mark.integration

KEY = streams.matcher_lease_key("0")


def test_a_second_holder_waits_until_the_first_releases(redis_url: str) -> None:
    r = bus.connect(redis_url)
    first, second = Lease(r, KEY, holder="h:1"), Lease(r, KEY, holder="h:2")
    assert first.try_acquire() is None
    assert second.try_acquire() == "h:1"
    stop = threading.Event()
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(second.acquire(stop, poll_s=0.02)))
    waiter.start()
    try:
        assert not got
        first.release()
        eventually(lambda: got == [True], what="the second holder takes the lease")
    finally:
        stop.set()
        waiter.join(5)
    assert r.get(KEY) == b"h:2"
    second.release()
    assert r.get(KEY) is None


def test_a_holder_killed_on_this_host_is_replaced_at_once(redis_url: str) -> None:
    r = bus.connect(redis_url)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    r.set(KEY, f"{socket.gethostname()}:{gone.pid}", px=60_000)
    assert Lease(r, KEY, holder="new:1").try_acquire() is None
    assert r.get(KEY) == b"new:1"
    # A live holder, or one on another host, is left alone.
    r.set(KEY, f"{socket.gethostname()}:{subprocess.os.getpid()}", px=60_000)  # type: ignore[attr-defined]
    assert Lease(r, KEY, holder="new:2").try_acquire() is not None
    r.set(KEY, "elsewhere:1", px=60_000)
    assert Lease(r, KEY, holder="new:3").try_acquire() == "elsewhere:1"


def test_losing_the_lease_is_reported(redis_url: str) -> None:
    r = bus.connect(redis_url)
    lease = Lease(r, KEY, ttl_s=0.6, holder="h:1")
    assert lease.try_acquire() is None
    lost: list[str] = []
    lease.keep(lost.append)
    try:
        r.set(KEY, "intruder:9")
        eventually(lambda: lost, what="the loss reported")
    finally:
        lease.release()
    assert "no longer held by h:1" in lost[0]
    assert r.get(KEY) == b"intruder:9"  # release never deletes someone else's lease


def test_a_second_matcher_for_the_shard_does_not_consume(redis_url: str) -> None:
    r = bus.connect(redis_url)
    settings = load({"REDIS_URL": redis_url, "FIXLAB_MATCHER_BLOCK_MS": "50"})
    r.set(KEY, "other-host:1", px=60_000)  # a live matcher elsewhere owns shard 0
    bus.publish(r, streams.orders_stream("0"),
                [NewOrder("A", "c1", "ACORN.LAB", 1, 10000, 1, 0, "gw", 1, 1)], 1000)
    service = MatcherService(settings)
    service.lease_holder = "this-host:2"
    stop = threading.Event()
    worker = threading.Thread(target=service.run, args=(stop,))
    worker.start()
    try:
        eventually(lambda: service.lease is not None and service.lease.attempts >= 3, what="waiting")
        events = streams.shard_events_stream("0", "gw")
        assert not r.exists(events)  # nothing consumed while another one owns it
        r.delete(KEY)  # the other matcher stopped
        eventually(lambda: r.exists(events), what="events once the lease is free")
        assert r.get(KEY) == b"this-host:2"
    finally:
        stop.set()
        worker.join(10)
    assert not worker.is_alive()
    assert r.get(KEY) is None
