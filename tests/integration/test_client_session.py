"""The terminal client's session (services/client/session.py) against a real exchange: redis-server,
matcher and gateway as processes; QuickFIX initiator behind the client's own tap."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from services.client.session import (
    LOGGED_OUT,
    REFUSED,
    TIMEOUT,
    UNREACHABLE,
    ClientSession,
    Record,
    SessionError,
    connect_free,
)
from shared.fix.codec import field
from shared.redis_server import free_port
from tests.gateway_stack import FixClient, Stack, fix_now, gateway_stack
from tests.helpers import eventually

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with gateway_stack(None) as s:
        yield s


class Wire:
    """The records a session's tap saw, thread-safe."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self._lock = threading.Lock()

    def __call__(self, rec: Record) -> None:
        with self._lock:
            self.records.append(rec)

    def find(self, source: str, msg_type: str, **tags: str) -> Record | None:
        with self._lock:
            for r in self.records:
                if r.source == source and field(r.raw, 35) == msg_type and all(
                        field(r.raw, int(t[1:])) == v for t, v in tags.items()):
                    return r
        return None


def order(clordid: str, price: str = "99.90", qty: str = "10") -> list[tuple[int, object]]:
    return [(35, "D"), (11, clordid), (55, "ACORN.LAB"), (54, "1"), (60, fix_now()), (38, qty), (40, "2"),
            (44, price), (59, "0")]


def test_logon_order_execution_report(stack: Stack) -> None:
    wire = Wire()
    with ClientSession("CLIENT01", port=stack.fix_port, on_record=wire) as s:
        s.wait_logon(5)
        assert s.logged_on
        s.send(order("t1"))
        er = eventually(lambda: wire.find("exchange", "8", t11="t1", t150="0"), what="ExecutionReport New")
        assert not er.withheld
        assert wire.find("client", "A") is not None
        # The tap records the ER as it passes it on: the engine counts it once it has taken it.
        eventually(lambda: s.seqs()[1] >= 3, what="the ER counted by the client's engine")
        sender, target = s.seqs()
        assert sender >= 3 and target >= 3
        assert s.exchange_seqs() == (target, sender)  # the exchange's numbers, read off the wire
        assert not wire.find("client", "3")  # a strict stock client rejects nothing the exchange sends
    assert s.status == LOGGED_OUT
    assert wire.find("exchange", "5") is not None  # the exchange answered the Logout stop() sent


def test_drop_next_gets_a_resend_request(stack: Stack) -> None:
    wire = Wire()
    with ClientSession("CLIENT02", port=stack.fix_port, on_record=wire) as s:
        s.wait_logon(5)
        s.drop_next()
        s.send(order("d1"))
        dropped = eventually(lambda: wire.find("client", "D", t11="d1"), what="the order seen")
        assert dropped.withheld
        s.send(order("d2"))
        eventually(lambda: wire.find("exchange", "2"), what="ResendRequest from the exchange")
        # The engine resends the dropped order (43=Y) and the exchange acknowledges both.
        eventually(lambda: wire.find("client", "D", t11="d1", t43="Y"), what="the resend")
        eventually(lambda: wire.find("exchange", "8", t11="d1"), what="an ER for the resent order")
        eventually(lambda: wire.find("exchange", "8", t11="d2"), what="an ER for the second order")


def test_silent_session_is_logged_out_by_the_exchange(stack: Stack) -> None:
    wire = Wire()
    statuses: list[tuple[str, str]] = []
    with ClientSession("CLIENT03", port=stack.fix_port, heartbeat_s=1, on_record=wire,
                       on_status=lambda st, text: statuses.append((st, text))) as s:
        s.wait_logon(5)
        s.go_silent()
        eventually(lambda: wire.find("exchange", "1"), timeout=10, what="TestRequest")
        logout = eventually(lambda: wire.find("exchange", "5"), timeout=10, what="the exchange's Logout")
        assert b"TestRequest" in logout.raw
        eventually(lambda: s.status == LOGGED_OUT, what="the session ended")
        assert "silent" in s.text
        # A fresh connection (MemoryStore, 141=Y) logs on again.
        s.reconnect()
        s.wait_logon(5)
    assert statuses[0][0] == "logged_on"


def test_unreachable_exchange_fails_fast_with_one_line() -> None:
    port = free_port()  # nothing listens there
    start = time.monotonic()
    with ClientSession("CLIENT04", port=port) as s, pytest.raises(SessionError) as err:
        s.wait_logon(5)
    assert time.monotonic() - start < 3
    assert err.value.kind == UNREACHABLE
    assert "unreachable" in str(err.value) and "\n" not in str(err.value)


def test_unknown_comp_id_is_refused_with_one_line(stack: Stack) -> None:
    with ClientSession("NOSUCH", port=stack.fix_port) as s, pytest.raises(SessionError) as err:
        s.wait_logon(5)
    assert err.value.kind == REFUSED
    assert "NOSUCH" in str(err.value) and "\n" not in str(err.value)


def test_a_silent_listener_times_out() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with ClientSession("CLIENT05", port=port) as s, pytest.raises(SessionError) as err:
            s.wait_logon(1)
        assert err.value.kind == TIMEOUT


def test_connect_free_skips_a_comp_id_logged_on_already(stack: Stack) -> None:
    with FixClient(stack.fix_port, "CLIENT06"):
        s = connect_free(["CLIENT06", "CLIENT07"], port=stack.fix_port)
        try:
            assert s.comp_id == "CLIENT07" and s.logged_on
        finally:
            s.stop()


def test_file_store_keeps_sequence_numbers(stack: Stack, tmp_path: object) -> None:
    from pathlib import Path
    store = Path(str(tmp_path)) / "store"
    with ClientSession("CLIENT08", port=stack.fix_port, store_dir=store) as s:
        s.wait_logon(5)
        s.send(order("f1"))
        eventually(lambda: s.seqs()[1] >= 3, what="the ER counted")
        first = s.seqs()
    with ClientSession("CLIENT08", port=stack.fix_port, store_dir=store) as s:
        s.wait_logon(5)
        assert s.seqs()[0] > first[0]  # went on from the stored numbers, not from 1


def test_stop_is_idempotent_and_bounded(stack: Stack) -> None:
    s = ClientSession("CLIENT09", port=stack.fix_port).start()
    s.wait_logon(5)
    start = time.monotonic()
    s.stop()
    s.stop()
    assert time.monotonic() - start < 5
    with pytest.raises(SessionError):
        s.send(order("x"))
