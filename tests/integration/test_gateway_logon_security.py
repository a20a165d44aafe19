"""Passwords at Logon (FIXLAB_CREDENTIALS): stock clients of each version log on with theirs; a wrong
password gets a generic Logout and, repeated, a lockout; the gateway goes on serving other sessions."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import quickfix as fix
import redis

from services.gateway.logon import LOCKED, REFUSED
from shared import credentials
from tests.gateway_stack import FixClient, Stack, gateway_stack
from tests.helpers import eventually
from tests.stock_client import StockClient, stock_sessions

pytestmark = pytest.mark.integration

PASSWORDS = {"CLIENT01": "one-secret", "CLIENT42-01": "four-two", "CLIENT50-01": "five-oh",
             "CLIENT03": "three", "CLIENT05": "five"}


class PasswordClient(StockClient):
    """A stock client that puts its password on its Logon: 553/554, or RawData 96 in FIX 4.2."""

    def toAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        if msg.getHeader().getField(35) == "A":
            comp = sid.getSenderCompID().getValue()
            password = PASSWORDS[comp]
            if sid.getBeginString().getValue() == "FIX.4.2":
                msg.setField(fix.RawDataLength(len(password)))
                msg.setField(fix.RawData(password))
            else:
                msg.setField(fix.Username(comp))
                msg.setField(fix.Password(password))
        super().toAdmin(msg, sid)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    path = tmp_path_factory.mktemp("creds") / "credentials"
    for comp, password in PASSWORDS.items():
        credentials.set_password(path, comp, password)
    env = {"FIXLAB_CREDENTIALS": str(path), "FIXLAB_FIX_HOST": "0.0.0.0", "FIXLAB_LOCKOUT_FAILURES": "3",
           "FIXLAB_LOCKOUT_WINDOW": "120", "FIXLAB_LOCKOUT_SECONDS": "600"}
    with gateway_stack(None, matcher=False, env=env) as s:
        yield s


def refusal(port: int, comp: str, logon: list[tuple[int, object]], begin: str = "FIX.4.4") -> str:
    """The Text (58) of the Logout a Logon of ``comp`` gets; the connection closes after it."""
    with FixClient(port, comp, logon=False, begin=begin) as c:
        c.send("A", [(98, 0), (108, 30), (141, "Y"), *logon])
        logout = c.expect("5")
        assert c.closed()
        assert not any(m.get(35) == "A" for m in c.received)
        text = logout.get(58, "")
        # QuickFIX puts "Rejected Logon Attempt: " before the reason the acceptor gave
        return text.removeprefix("Rejected Logon Attempt: ")


def test_stock_clients_of_each_version_log_on_with_passwords(stack: Stack, tmp_path: Path) -> None:
    comps = ["CLIENT01", "CLIENT42-01", "CLIENT50-01"]
    with stock_sessions(tmp_path, stack.fix_port, comps, app=PasswordClient,
                        fix_version=["4.4", "4.2", "5.0SP2"]) as sessions:
        for s in sessions:
            assert s.client.session_rejects() == []
            assert not s.client.errors


@pytest.mark.parametrize(("comp", "logon", "begin"), [
    ("CLIENT01", [(553, "CLIENT01"), (554, "wrong")], "FIX.4.4"),
    ("CLIENT01", [], "FIX.4.4"),                                         # no password at all
    ("CLIENT05", [(553, "CLIENT02"), (554, "five")], "FIX.4.4"),  # someone else's Username
    ("CLIENT42-01", [(95, 5), (96, "wrong")], "FIX.4.2"),
])
def test_bad_credentials_get_one_generic_logout(stack: Stack, comp: str, logon: list[tuple[int, object]],
                                                begin: str) -> None:
    assert refusal(stack.fix_port, comp, logon, begin) == REFUSED


def test_wrong_passwords_until_lockout_then_even_the_right_one_is_refused(stack: Stack) -> None:
    for _ in range(3):
        assert refusal(stack.fix_port, "CLIENT03", [(554, "guess")]) in (REFUSED, LOCKED)
    assert refusal(stack.fix_port, "CLIENT03", [(554, "three")]) == LOCKED
    # The gateway goes on serving: a CompID the file does not name logs on as before, and trades.
    with FixClient(stack.fix_port, "CLIENT02") as c:
        c.send("D", {11: "after-lockout", 21: 1, 55: "ACORN.LAB", 54: 1, 38: 10, 40: 2, 44: "100.00",
                     60: "20260101-00:00:00"})
    with FixClient(stack.fix_port, "CLIENT01", logon_extra=[(554, "one-secret")]):
        pass


def from_other_machine(port: int, comp: str) -> FixClient:
    """A FixClient whose socket comes from 127.0.0.2 ("another machine" to the address rules)."""
    c = FixClient(port, comp, logon=False)
    c.sock.close()
    c.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    c.sock.settimeout(10)
    c.sock.bind(("127.0.0.2", 0))
    c.sock.connect(("127.0.0.1", port))
    return c


@pytest.mark.parametrize("comp", ["BOT01", "BENCH001", "LAB001"])
def test_own_comp_ids_are_refused_from_another_address(stack: Stack, comp: str) -> None:
    # QuickFIX 1.16's SocketAcceptor checks AllowedRemoteAddresses right after it processed the
    # Logon (docs/security.md): the peer may see the Logon answered, then the connection closes
    # before anything else it sent is read, so an order in the same write never trades.
    with from_other_machine(stack.fix_port, comp) as c:
        c.sock.sendall(c.message("A", [(98, 0), (108, 30), (141, "Y")]) + c.message(
            "D", {11: f"intruder-{comp}", 21: 1, 55: "ACORN.LAB", 54: 1, 38: 10, 40: 2, 44: "100.00",
                  60: "20260101-00:00:00"}, seq=2))
        assert c.closed()
        assert not any(m.get(35) in ("8", "j", "3") for m in c.received)
    # From the exchange's own address the same CompID logs on.
    with FixClient(stack.fix_port, comp):
        pass


def test_a_client_comp_id_may_log_on_from_another_address(stack: Stack) -> None:
    with from_other_machine(stack.fix_port, "CLIENT01") as c:
        c.send("A", [(98, 0), (108, 30), (141, "Y"), (554, "one-secret")])
        c.expect("A")


def test_nothing_of_the_refused_sessions_reached_the_bus(stack: Stack) -> None:
    """Every stream on the bus, read whole: the order CLIENT02 sent is there (so the search can see
    orders), and none of the orders the refused peers sent is."""
    r = redis.Redis.from_url(stack.redis_url)
    try:
        def bus_holds(needle: bytes) -> bool:
            for key in r.scan_iter(_type="stream"):
                for _id, entry in r.xrange(key) or []:
                    if any(needle in bytes(value) for value in (entry or {}).values()):
                        return True
            return False
        eventually(lambda: bus_holds(b"after-lockout"), timeout=10, what="CLIENT02's order on the bus")
        assert not bus_holds(b"intruder-")
    finally:
        r.close()
