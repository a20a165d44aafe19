"""The gateway's two Redis paths against a real Redis: the lean RESP writer, and the events stream
(routing to the right session, dead-lettering what does not decode, one stream per gateway)."""

from __future__ import annotations

import pytest
import redis

from services.gateway.resp import RespConnection
from shared import streams
from shared.bus import publish
from shared.redis_server import free_port
from shared.schema import Accepted, NewOrder, decode_batch, encode_batch
from tests.gateway_stack import FixClient, gateway_stack
from tests.helpers import eventually

pytestmark = pytest.mark.integration


def test_resp_writer_appends_batches_atomically(redis_url: str) -> None:
    conn = RespConnection(redis_url)
    order = NewOrder("S", "c1", "ACORN.LAB", 1, 10_000, 1, 0, "gw", 2, 3)
    r = redis.Redis.from_url(redis_url)
    try:
        assert conn.xadd_batches([("s:a", encode_batch([order])), ("s:b", encode_batch([order, order]))],
                                 1000) == []
        entries = r.xrange("s:a") + r.xrange("s:b")
        assert [len(decode_batch(f[streams.BATCH_FIELD])) for _id, f in entries] == [1, 2]
        # Redis applies the rest of a transaction when one command fails at EXEC: the failed index
        # comes back so that only it is retried.
        r.set("s:wrong", "not a stream")
        failed = conn.xadd_batches([("s:a", encode_batch([order])), ("s:wrong", encode_batch([order]))], 1000)
        assert failed == [1] and r.xlen("s:a") == 2
    finally:
        conn.close()
        r.close()


def test_resp_writer_reports_an_unreachable_redis_as_a_connection_error() -> None:
    conn = RespConnection(f"redis://127.0.0.1:{free_port()}/0", timeout_s=1)
    with pytest.raises(redis.ConnectionError):
        conn.xadd_batches([("s", b"x")], 1000)


def test_resp_writer_selects_the_database_in_the_url(redis_url: str) -> None:
    conn = RespConnection(redis_url.rsplit("/", 1)[0] + "/3")
    conn.xadd_batches([("s:db3", encode_batch([Accepted("S", "c", "O", "X", 1, 1, 1, 0, "E", 1)]))], 1000)
    r3 = redis.Redis.from_url(redis_url.rsplit("/", 1)[0] + "/3")
    assert r3.xlen("s:db3") == 1
    r3.flushdb()
    r3.close()
    conn.close()


def test_events_reach_the_right_session_and_bad_entries_are_dead_lettered() -> None:
    with gateway_stack(None, matcher=False, gateway_id="gwbus") as stack, \
            FixClient(stack.fix_port, "CLIENT01") as one, FixClient(stack.fix_port, "CLIENT02") as two:
        r = redis.Redis.from_url(stack.redis_url)
        # The gateway reads its own events stream (its intake's refusals) and matcher shard 0's for it.
        events, shard_events = streams.events_stream("gwbus"), streams.shard_events_stream("0", "gwbus")
        r.xadd(events, {streams.BATCH_FIELD: b"\xc1 not msgpack"})
        r.xadd(shard_events, {b"other": b"field"})
        publish(r, events, [Accepted("CLIENT02", "x2", "O-2", "ACORN.LAB", 2, 10_100, 3, 0, "E-2", 1),
                            Accepted("NOSUCH", "x9", "O-9", "ACORN.LAB", 1, 10_000, 1, 0, "E-9", 1)], 1000)
        publish(r, shard_events,
                [Accepted("CLIENT01", "x1", "O-1", "BIRCH.LAB", 1, 2_500, 5, 1, "E-1", 1)], 1000)
        # Another gateway's streams are not ours: these must never arrive.
        for other in (streams.events_stream("gwother"), streams.shard_events_stream("0", "gwother")):
            publish(r, other, [Accepted("CLIENT01", "x-other", "O", "ACORN.LAB", 1, 10_000, 1, 0, "E", 1)],
                    1000)
        got1 = one.expect("8", lambda m: m.get(11) == "x1")
        got2 = two.expect("8", lambda m: m.get(11) == "x2")
        assert (got1[55], got1[44], got1[38], got1[59]) == ("BIRCH.LAB", "25.00", "5", "1")
        assert (got2[54], got2[44], got2[37]) == ("2", "101.00", "O-2")
        assert not any(m.get(11) == "x-other" for m in one.received)
        # Dead-letters and acknowledgements go out with the events thread's next read.
        eventually(lambda: r.xlen(streams.DEADLETTER_STREAM) == 2)
        dead = r.xrange(streams.DEADLETTER_STREAM)
        assert {f[b"stream"] for _id, f in dead} == {events.encode(), shard_events.encode()}
        for stream in (events, shard_events):
            eventually(lambda stream=stream: r.xpending(stream, streams.GATEWAY_GROUP)["pending"] == 0)
        r.close()
