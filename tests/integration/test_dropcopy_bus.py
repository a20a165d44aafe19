"""services.gateway.dropcopy against a real Redis, the FIX side a hand-written fake (what was sent to
whom): a cursor per drop copy session, a Logout in the middle of an entry, TrdMatchID left out, and
the engine thread's copies written ahead of the events thread's next batch."""

from __future__ import annotations

import pytest
import redis

from services.gateway.dropcopy import DropCopy
from shared import streams
from shared.redis_server import free_port

pytestmark = pytest.mark.integration

FILL = "35=8\x0117={}\x01150=F\x01527=M1\x01880=M1\x01"


class FakeSessions:
    """Which drop copy sessions are logged on, and every (session, body, extra) sent to them."""

    def __init__(self, *logged_on: str, refuse_after: int | None = None) -> None:
        self.on = set(logged_on)
        self.sent: list[tuple[str, str, str]] = []
        self.refuse_after = refuse_after  # sends that succeed before the session "logs out"

    def send(self, comp: str, body: str, extra: str) -> bool:
        if self.refuse_after is not None and len(self.sent) >= self.refuse_after:
            self.on.discard(comp)
            return False
        self.sent.append((comp, body, extra))
        return True

    def bodies(self, comp: str) -> list[str]:
        return [body for c, body, _extra in self.sent if c == comp]


def drop_copy(r: redis.Redis, fake: FakeSessions, trd_match: frozenset[str] = frozenset()) -> DropCopy:
    return DropCopy(r, {"A1": "ACME", "A2": "ACME"}, {"DC44": "ACME", "DC42": "ACME"}, send=fake.send,
                    logged_on=lambda c: c in fake.on,
                    begin_string=lambda c: "FIX.4.2" if c == "DC42" else "FIX.4.4",
                    holds=lambda c: True, trd_match=trd_match)


def test_each_drop_copy_session_of_a_firm_has_its_own_cursor(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    fake = FakeSessions("DC44")
    dc = drop_copy(r, fake)
    dc.keep([("A1", FILL.format("E1")), ("A2", FILL.format("E2")), ("OUT", FILL.format("E0"))])
    assert dc.tell(["DC44"]) == 2  # OUT is no member: not copied
    dc.keep([("A1", FILL.format("E3"))])
    fake.on.add("DC42")  # logs on later: it is behind, DC44 is not
    assert dc.tell(["DC44", "DC42"]) == 4  # E3 to DC44; E1, E2, E3 to DC42
    assert [b.split("\x01")[1] for b in fake.bodies("DC44")] == ["17=E1", "17=E2", "17=E3"]
    assert [b.split("\x01")[1] for b in fake.bodies("DC42")] == ["17=E1", "17=E2", "17=E3"]
    extras = {(c, e) for c, _b, e in fake.sent}
    assert extras == {("DC44", "128=A1\x01797=Y\x01"), ("DC44", "128=A2\x01797=Y\x01"),
                      ("DC42", "128=A1\x01"), ("DC42", "128=A2\x01")}
    assert dc.tell(["DC44", "DC42"]) == 0  # nothing twice
    # Neither gets TrdMatchID (880) unless it is a session whose fills carry it.
    assert all("880=" not in b and "527=M1" in b for _c, b, _e in fake.sent)
    r.close()


def test_trd_match_id_kept_for_a_drop_copy_that_gets_it(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    fake = FakeSessions("DC44")
    dc = drop_copy(r, fake, trd_match=frozenset({"DC44"}))
    dc.keep([("A1", FILL.format("E1"))])
    assert dc.tell(["DC44"]) == 1 and "\x01880=M1\x01" in fake.bodies("DC44")[0]
    r.close()


def test_a_logout_mid_entry_sends_the_entry_again_at_the_next_logon(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    fake = FakeSessions("DC44", refuse_after=1)
    dc = drop_copy(r, fake)
    dc.keep([("A1", FILL.format("E1")), ("A2", FILL.format("E2"))])  # one entry
    dc.keep([("A1", FILL.format("E3"))])
    assert dc.tell(["DC44"]) == 1  # E1 sent, then the session went away
    assert r.get(streams.dropcopy_told_key("ACME", "DC44")) is None  # the cursor did not move
    fake.on.add("DC44")
    fake.refuse_after = None
    assert dc.tell(["DC44"]) == 3  # the whole entry again (E1 twice, 797=Y says so), then E3
    assert [b.split("\x01")[1] for b in fake.bodies("DC44")] == ["17=E1", "17=E1", "17=E2", "17=E3"]
    r.close()


def test_the_engine_threads_copies_go_ahead_of_the_next_batch(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    fake = FakeSessions("DC44")
    dc = drop_copy(r, fake)
    dc.copy("A1", "35=8\x0117=R1\x01150=8\x01")  # a refusal the engine thread sent
    dc.copy("A1", "35=9\x0111=x\x01")  # not an ExecutionReport: not copied
    dc.keep([("A2", FILL.format("E2"))])  # the events thread's next batch
    assert dc.tell(["DC44"]) == 2
    assert [b.split("\x01")[1] for b in fake.bodies("DC44")] == ["17=R1", "17=E2"]
    r.close()


def test_a_redis_error_keeps_the_engine_threads_copies(redis_url: str) -> None:
    bad = redis.Redis(host="127.0.0.1", port=free_port(), socket_connect_timeout=0.5)  # nothing listens
    fake = FakeSessions("DC44")
    dc = drop_copy(bad, fake)
    dc.copy("A1", "35=8\x0117=R1\x01150=8\x01")
    with pytest.raises(redis.ConnectionError):
        dc.keep([("A2", FILL.format("E2"))])
    r = redis.Redis.from_url(redis_url)
    dc.r = r  # Redis is back
    dc.keep([("A2", FILL.format("E2"))])  # the events thread reads its batch again
    assert dc.tell(["DC44"]) == 2
    assert [b.split("\x01")[1] for b in fake.bodies("DC44")] == ["17=R1", "17=E2"]
    r.close()
