"""Attackers from another machine (127.0.0.2) against a whole exchange (redis-server, matcher, gateway
with FIXLAB_CREDENTIALS), while a stock client on the exchange's own machine stays logged on and trades
between attacks:

- wrong passwords until the lockout, then the right one refused too for the lockout period;
- the exchange's own CompIDs (LAB, BOT, BENCH) from outside, one of them with its valid password;
- an unknown CompID, and a Username that is not the session's own;
- a drop copy session (logged on from outside with its password) sending orders;
- ``fixlab admin kill`` without the operator's token, and with a wrong one.

Each gets its refusal (a Logout whose 58 never says which part of a credential was wrong, the
connection closed, or a refusal of the order with a Text), and nothing any of them sent reaches the
bus (every stream read whole, the trader's own order found there as the control).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import quickfix as fix
import redis

from services.gateway.guard import DROP_COPY_TEXT
from services.gateway.logon import LOCKED, REFUSED
from shared import credentials, streams
from shared.operator import TOKEN_ENV, TOKEN_FILE_ENV
from tests.gateway_stack import ROOT, FixClient, Stack, gateway_stack, matcher_available
from tests.helpers import eventually
from tests.stock_client import StockClient, StockSession, nos, stock_sessions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]

OUTSIDE = "127.0.0.2"
TOKEN = "attackers-test-operator-token-0123456789"
PASSWORDS = {"CLIENT01": "one-secret", "ACMEDC": "copy-secret", "BOT01": "bot-secret"}
SESSIONS = """
[FIRM]
Name=ACME
Sessions=ACME01
[SESSION]
TargetCompID=ACME01
[SESSION]
TargetCompID=ACMEDC
DropCopyFor=ACME
"""
ORDER = {21: 1, 55: "ACORN.LAB", 54: 1, 38: 10, 40: 2, 44: "100.00", 60: "20260101-00:00:00"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("attackers")
    creds = tmp / "credentials"
    sessions = tmp / "sessions.cfg"
    sessions.write_text(SESSIONS)
    for comp, password in PASSWORDS.items():
        if comp in credentials.known_comp_ids():
            credentials.set_password(creds, comp, password)
            continue
        # The sessions file's own CompID (the drop copy): ``fixlab passwd`` as its user runs it.
        done = subprocess.run([sys.executable, "-m", "services.cli", "passwd", comp], input=password + "\n",
                              env={**os.environ, "FIXLAB_CREDENTIALS": str(creds),
                                   "FIXLAB_FIX_SESSIONS_FILE": str(sessions)},
                              cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
    env = {"FIXLAB_CREDENTIALS": str(creds), "FIXLAB_LOCKOUT_FAILURES": "3", "FIXLAB_LOCKOUT_WINDOW": "120",
           "FIXLAB_LOCKOUT_SECONDS": "600", "FIXLAB_FIX_SESSIONS_FILE": str(sessions), TOKEN_ENV: TOKEN,
           "FIXLAB_MATCHER_BLOCK_MS": "100"}
    with gateway_stack(None, env=env, gateway_id="gwatk") as s:
        yield s


@pytest.fixture(scope="module")
def trader(stack: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StockSession]:
    """A stock client on the exchange's own machine, logged on throughout the module. HeartBtInt 10:
    at stock_sessions' 1 s, a stall of ~2.4 s of either process (four workers and a CPU hog on two
    cores) made the gateway's TestRequest go unanswered and the control session end mid-module."""
    with stock_sessions(tmp_path_factory.mktemp("trader"), stack.fix_port, ["CLIENT02"],
                        heartbeat_s=10) as (s,):
        yield s


_orders = iter(range(1_000_000))


def still_trades(trader: StockSession) -> str:
    clordid = f"trader-{next(_orders)}"
    trader.send("D", nos(clordid, 1, 1, "95.00"))
    assert trader.client.wait("8", lambda m: m.get(11) == clordid)[150] == "0"
    return clordid


def logon_refused(port: int, comp: str, logon: list[tuple[int, object]]) -> str:
    """From outside: a Logon and, in the same write, an order; the Logout's 58 (the connection closes
    after it and nothing but the Logout came back)."""
    with FixClient(port, comp, logon=False, source=OUTSIDE) as c:
        c.send_raw(c.message("A", [(98, 0), (108, 30), (141, "Y"), *logon])
                   + c.message("D", {11: f"intruder-{comp}-{next(_orders)}", **ORDER}, seq=2))
        assert c.closed()
        assert [m.get(35) for m in c.received] == ["5"], c.received
        return c.received[0].get(58, "").removeprefix("Rejected Logon Attempt: ")


def test_wrong_passwords_until_lockout_then_even_the_right_one(stack: Stack, trader: StockSession) -> None:
    still_trades(trader)
    for guess in ("guess", "one-secreT", "one-secret "):
        assert logon_refused(stack.fix_port, "CLIENT01", [(553, "CLIENT01"), (554, guess)]) == REFUSED
        still_trades(trader)
    assert logon_refused(stack.fix_port, "CLIENT01", [(553, "CLIENT01"), (554, "one-secret")]) == LOCKED
    still_trades(trader)


@pytest.mark.parametrize(("comp", "logon"), [
    ("ACMEDC", [(553, "CLIENT02"), (554, "copy-secret")]),  # someone else's Username: the same text
    ("ACMEDC", []),
])
def test_every_bad_credential_gets_the_same_text(stack: Stack, trader: StockSession, comp: str,
                                                 logon: list[tuple[int, object]]) -> None:
    assert logon_refused(stack.fix_port, comp, logon) == REFUSED
    still_trades(trader)


@pytest.mark.parametrize(("comp", "logon"), [
    ("BOT01", [(554, "bot-secret")]),  # a valid password from the wrong address
    ("BENCH001", []),
    ("LAB001", []),
    ("NOBODY", []),  # no such session: the engine closes the connection
])
def test_own_and_unknown_comp_ids_from_outside(stack: Stack, trader: StockSession, comp: str,
                                               logon: list[tuple[int, object]]) -> None:
    # QuickFIX 1.16 checks AllowedRemoteAddresses after it processed the Logon (docs/security.md):
    # the peer may read a Logon back, then the connection closes before the order is read.
    with FixClient(stack.fix_port, comp, logon=False, source=OUTSIDE) as c:
        c.send_raw(c.message("A", [(98, 0), (108, 30), (141, "Y"), *logon])
                   + c.message("D", {11: f"intruder-{comp}", **ORDER}, seq=2))
        assert c.closed()
        assert not any(m.get(35) in ("8", "3", "j") for m in c.received), c.received
    still_trades(trader)


def test_a_drop_copy_from_outside_reads_copies_and_may_not_trade(stack: Stack, trader: StockSession,
                                                                  tmp_path: Path) -> None:
    with FixClient(stack.fix_port, "ACMEDC", source=OUTSIDE,
                   logon_extra=[(553, "ACMEDC"), (554, "copy-secret")]) as dc:
        dc.send("D", {11: "intruder-dc-1", **ORDER})
        er = dc.expect("8", lambda m: m.get(11) == "intruder-dc-1")
        assert (er[150], er[39], er[58]) == ("8", "8", DROP_COPY_TEXT)
        dc.send("F", {41: "intruder-dc-1", 11: "intruder-dc-2", 55: "ACORN.LAB", 54: 1,
                      60: "20260101-00:00:00"})
        assert dc.expect("9", lambda m: m.get(11) == "intruder-dc-2")[58] == DROP_COPY_TEXT
        dc.send("q", {11: "intruder-dc-3", 530: 7, 60: "20260101-00:00:00"})
        assert dc.expect("r", lambda m: m.get(11) == "intruder-dc-3")[531] == "0"
        still_trades(trader)
        # It still reads its firm's copies.
        with stock_sessions(tmp_path, stack.fix_port, ["ACME01"]) as (member,):
            member.send("D", nos("acme-1", 2, 1, "110.00"))
            copy = dc.expect("8", lambda m: m.get(11) == "acme-1")
            assert (copy[128], copy[797]) == ("ACME01", "Y")


def connected_from(address: str, port: int) -> bool:
    """Whether a TCP connection from ``address`` to 127.0.0.1:``port`` is established (/proc/net/tcp)."""
    local = "".join(f"{int(b):02X}" for b in reversed(address.split(".")))
    remote = f"0100007F:{port:04X}"
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].startswith(local + ":") and fields[2] == remote and fields[3] == "01":
            return True
    return False


class PasswordClient(StockClient):
    """A stock client that puts its Username and Password (553/554) on its Logon."""

    def toAdmin(self, msg: fix.Message, sid: fix.SessionID) -> None:
        if msg.getHeader().getField(35) == "A":
            comp = sid.getSenderCompID().getValue()
            msg.setField(fix.Username(comp))
            msg.setField(fix.Password(PASSWORDS[comp]))
        super().toAdmin(msg, sid)


def test_a_stock_drop_copy_client_on_another_machine(stack: Stack, trader: StockSession,
                                                     tmp_path: Path) -> None:
    """QuickFIX's own initiator, strict, its socket from 127.0.0.2 (SocketConnectSourceHost): it logs
    on with its password, reads its firm's copies without a Reject, and its order is refused."""
    with stock_sessions(tmp_path, stack.fix_port, ["ACMEDC"], app=PasswordClient,
                        source_host=OUTSIDE) as (dc,):
        assert connected_from(OUTSIDE, stack.fix_port), "the stock client's socket is not from 127.0.0.2"
        with stock_sessions(tmp_path, stack.fix_port, ["ACME01"]) as (member,):
            member.send("D", nos("acme-2", 2, 1, "111.00"))
            copy = dc.client.wait("8", lambda m: m.get(11) == "acme-2")
            assert (copy[128], copy[797], copy[150]) == ("ACME01", "Y", "0")
        dc.send("D", nos("intruder-dc-stock", 1, 1, "100.00"))
        er = dc.client.wait("8", lambda m: m.get(11) == "intruder-dc-stock")
        assert (er[150], er[58]) == ("8", DROP_COPY_TEXT)
        assert dc.client.session_rejects() == [] and dc.client.errors == []
    still_trades(trader)


def admin(stack: Stack, *args: str, token: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in (TOKEN_ENV, TOKEN_FILE_ENV)}
    env.update({"REDIS_URL": stack.redis_url, TOKEN_FILE_ENV: "/nonexistent/token"})
    if token is not None:
        env[TOKEN_ENV] = token
    return subprocess.run([sys.executable, "-m", "services.cli", "admin", "--timeout", "10", *args],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_fixlab_admin_without_the_operators_token(stack: Stack, trader: StockSession) -> None:
    none = admin(stack, "kill", "CLIENT02", token=None)
    assert none.returncode == 2 and "refused: no operator token" in none.stderr
    wrong = admin(stack, "kill", "CLIENT02", token="a-guess-at-the-operators-token-000")
    assert wrong.returncode == 1 and "refused: bad operator token" in wrong.stdout, wrong.stdout
    r = redis.Redis.from_url(stack.redis_url)
    try:
        assert not r.sismember(streams.KILLED_KEY, "CLIENT02")
    finally:
        r.close()
    still_trades(trader)


def test_nothing_of_the_attackers_reached_the_bus(stack: Stack, trader: StockSession) -> None:
    """Runs last: every stream read whole; the trader's orders are there (the search sees orders),
    none of the intruders' is (the drop copy stream holds only the member's report)."""
    clordid = still_trades(trader).encode()
    r = redis.Redis.from_url(stack.redis_url)
    try:
        def bus_holds(needle: bytes) -> bool:
            for key in r.scan_iter(_type="stream"):
                for _id, entry in r.xrange(key) or []:
                    if any(needle in bytes(value) for value in (entry or {}).values()):
                        return True
            return False
        eventually(lambda: bus_holds(clordid), what="the trader's order on the bus")
        assert not bus_holds(b"intruder-")
    finally:
        r.close()
