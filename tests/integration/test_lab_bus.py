"""The lab's bus side: bad commands and starts, limits, and CompIDs claimed once across gateways."""

from __future__ import annotations

import contextlib
import socket
import threading

import pytest
import redis

from services.gateway.lab.claims import CompIdClaims
from shared import streams
from shared.bus import publish
from shared.clock import now_ns
from shared.compids import LAB_COMP_IDS
from shared.redis_server import RedisServer, free_port
from shared.schema import LabStart
from tests.helpers import eventually
from tests.integration.test_lab_support import Lab, command, lab_manager, plain_exchange, start_lab, tags

pytestmark = pytest.mark.integration

GW = "gwlab"


def deadletters(r: redis.Redis) -> list[dict[bytes, bytes]]:
    return [f for _, f in r.xrange(streams.DEADLETTER_STREAM)]  # type: ignore[union-attr]


def test_bad_commands_get_a_notice_and_the_session_survives(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    with plain_exchange() as exchange, lab_manager(redis_url, exchange.port):
        lab = Lab(r, "bad-1")
        start_lab(r, lab.lab_id)
        lab.wait_status("logged_on")
        command(r, GW, lab.lab_id, "explode")
        lab.wait_notice("unknown command 'explode'")
        command(r, GW, lab.lab_id, "cancel", orig_clordid="never-sent")
        lab.wait_notice("unknown order 'never-sent'")
        command(r, GW, lab.lab_id, "order", symbol="ACORN.LAB", side=1, price="1\x0135=5", qty=1)
        lab.wait_notice("cannot carry")
        command(r, GW, lab.lab_id, "order", symbol="ACORN.LAB", side=7, price="100", qty=1)
        lab.wait_notice("neither 1")
        command(r, GW, "ghost", "order", symbol="ACORN.LAB", side=1, price="100", qty=1)
        ghost = Lab(r, "ghost").wait_notice("no lab session 'ghost'")
        assert ghost.level == "error"
        assert 0 < r.ttl(streams.lab_stream("ghost")) <= 300
        # Entries the lab cannot address or decode go to the dead-letter stream, acknowledged.
        command(r, GW, "bad id!", "order")
        publish(r, streams.lab_commands_stream(GW), [LabStart("x", "1.2.3.4", now_ns())], 1000)
        r.xadd(streams.lab_commands_stream(GW), {streams.BATCH_FIELD: b"\xc1 not msgpack"})
        eventually(lambda: len(deadletters(r)) == 3, what="three dead letters")
        reasons = b" ".join(d[b"reason"] for d in deadletters(r))
        assert b"lab_id must be" in reasons and b"is not a LabCommand" in reasons
        # Nothing a visitor sent broke the session, and no bad message reached the exchange.
        assert all(not w.withheld for w in lab.wire())
        assert not lab.find("client", "D")
        command(r, GW, lab.lab_id, "order", symbol="ACORN.LAB", side=1, price="100.00", qty=1)
        lab.wait_wire("exchange", "8", t150="0")
        assert lab.state().status == "logged_on"  # type: ignore[union-attr]
        # A price the exchange refuses goes out as typed: the exchange's own answer is the lesson.
        command(r, GW, lab.lab_id, "order", symbol="ACORN.LAB", side=1, price="abc", qty=1)
        assert tags(lab.wait_wire("client", "D", t44="abc").raw)[44] == "abc"


class BlackHole:
    """Accepts connections and never answers: a Logon that gets no reply."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.conns.append(self.server.accept()[0])

    def close(self) -> None:
        for conn in self.conns:
            conn.close()
        with contextlib.suppress(OSError):
            self.server.shutdown(socket.SHUT_RDWR)
        self.server.close()
        self.thread.join(5)


def test_orders_before_logon_and_after_the_end_get_a_notice(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    hole = BlackHole()
    try:
        with lab_manager(redis_url, hole.port, logon_timeout_s=3.0):
            lab = Lab(r, "nolink-1")
            start_lab(r, lab.lab_id)
            lab.wait_wire("client", "A")  # the Logon went out; no answer comes
            command(r, GW, lab.lab_id, "order", symbol="ACORN.LAB", side=1, price="100", qty=1)
            lab.wait_notice("not logged on")
            end = lab.wait_status("ended")
            assert "could not log on to the exchange within 3 s" in end.text
            assert r.exists(streams.lab_compid_key(end.comp_id)) == 0
            command(r, GW, lab.lab_id, "order", symbol="ACORN.LAB", side=1, price="100", qty=1)
            lab.wait_notice("it ended or never started")
    finally:
        hole.close()


def test_an_unreachable_exchange_ends_the_session_with_the_reason(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    with lab_manager(redis_url, free_port(), logon_timeout_s=3.0):  # nothing listens there
        lab = Lab(r, "nolink-2")
        start_lab(r, lab.lab_id)
        end = lab.wait_status("ended")
        assert "could not log on" in end.text and "unreachable" in end.text
        assert lab.wire() == []  # not a byte reached the exchange


def test_limits_stale_and_duplicate_starts(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    with plain_exchange() as exchange, lab_manager(redis_url, exchange.port, max_sessions=1) as manager:
        one = Lab(r, "lim-1")
        start_lab(r, one.lab_id)
        one.wait_status("logged_on")
        two = Lab(r, "lim-2")
        start_lab(r, two.lab_id)
        assert "too many lab sessions" in two.wait_notice("too many").text
        assert two.wait_status("ended").comp_id == ""
        start_lab(r, one.lab_id)  # the page retried: still one session
        one.wait_notice("already running")
        old = Lab(r, "old-1")
        start_lab(r, old.lab_id, ts=now_ns() - 3600 * 10**9)
        old.wait_notice("waited")
        publish(r, streams.LAB_START_STREAM, [LabStart("no good", "x", now_ns())], 1000)
        eventually(lambda: any(b"lab_id must be" in d[b"reason"] for d in deadletters(r)),
                   what="a dead letter for a bad lab id")
        assert manager.live_lab_ids() == [one.lab_id]
        assert one.state().status == "logged_on"  # type: ignore[union-attr]


def test_two_gateways_never_hand_out_one_compid(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    with plain_exchange() as exchange, lab_manager(redis_url, exchange.port, gateway_id="gw-a"), \
            lab_manager(redis_url, exchange.port, gateway_id="gw-b"):
        labs = [Lab(r, f"two-{i}") for i in range(6)]
        for lab in labs:
            start_lab(r, lab.lab_id)
        states = [lab.wait_status("logged_on") for lab in labs]
        comp_ids = [s.comp_id for s in states]
        assert len(set(comp_ids)) == 6
        for s in states:
            assert r.get(streams.lab_compid_key(s.comp_id)) == f"{s.gateway_id}:{s.lab_id}".encode()
        # Commands go to the gateway that holds the session (its id is in the state).
        for s in states:
            command(r, s.gateway_id, s.lab_id, "order", symbol="BIRCH.LAB", side=2, price="25.00", qty=2)
        for lab in labs:
            lab.wait_wire("exchange", "8", t150="0")


def test_claims_are_atomic_and_go_round_in_turn(redis_url: str) -> None:
    claimers = [CompIdClaims(redis.Redis.from_url(redis_url), 30) for _ in range(2)]
    got: list[list[str | None]] = [[], []]

    def grab(i: int) -> None:
        for _ in range(40):
            got[i].append(claimers[i].claim(f"gw{i}:lab"))

    threads = [threading.Thread(target=grab, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    taken = [c for g in got for c in g if c is not None]
    assert sorted(taken) == sorted(LAB_COMP_IDS)  # each exactly once
    assert sum(c is None for g in got for c in g) == 80 - len(LAB_COMP_IDS)
    first = got[0][0]
    assert first is not None
    holder = claimers[0].holder(first)
    owner = "gw0:lab" if holder == "gw0:lab" else "gw1:lab"
    assert not claimers[0].release(first, "someone-else")  # only the holder releases
    assert claimers[0].release(first, owner)
    assert claimers[1].claim("gw1:again") == first  # the only free one
    assert claimers[1].renew(first, "gw1:again") and not claimers[1].renew(first, "gw0:lab")
    for c in LAB_COMP_IDS:
        claimers[0].release(c, claimers[0].holder(c) or "")
    # In turn: after a release, the next claim does not hand the same CompID straight back.
    a = claimers[0].claim("x:1")
    assert a is not None
    claimers[0].release(a, "x:1")
    assert claimers[0].claim("x:2") != a


def test_a_redis_outage_loses_no_record_and_commands_work_after(fresh_redis: RedisServer) -> None:
    r = redis.Redis.from_url(fresh_redis.url)
    with plain_exchange() as exchange, lab_manager(fresh_redis.url, exchange.port, heartbeat_s=1) as manager:
        lab = Lab(r, "outage-1")
        start_lab(r, lab.lab_id)
        lab.wait_status("logged_on")
        fresh_redis.stop()
        # The session lives on without Redis: its heartbeats queue in the outbox.
        eventually(lambda: manager.outbox.pending >= 3, timeout=15, what="records queued while Redis is down")
        fresh_redis.start()
        eventually(lambda: manager.outbox.pending == 0, timeout=15, what="the queue written after the outage")
        command(r, GW, lab.lab_id, "order", symbol="ACORN.LAB", side=1, price="100.00", qty=1)
        lab.wait_wire("exchange", "8", t150="0", timeout=15)
        numbers = [w.n for w in lab.wire()]
        assert numbers == list(range(1, len(numbers) + 1))  # every record, once, in order
        assert lab.state().status == "logged_on"  # type: ignore[union-attr]
