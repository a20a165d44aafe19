"""The terminal client in FIX 4.2 and FIX 5.0 SP2 (``--fix-version``) against a real exchange: each
logs on in its version with the stock dictionary and strict validation, they trade with each other,
each follows its order to Filled from its own version's reports, and the wire is named with the
version's dictionary; no session Reject either way."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from services.client.commands import parse
from services.client.core import Client, Decoded
from services.client.session import ClientSession
from shared.fix.dictionary import load_version
from shared.fix.versions import version
from tests.gateway_stack import ROOT, Stack, gateway_stack
from tests.helpers import eventually

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with gateway_stack(None) as s:
        yield s


class Seen:
    def __init__(self) -> None:
        self.decoded: list[Decoded] = []
        self._lock = threading.Lock()

    def __call__(self, d: Decoded) -> None:
        with self._lock:
            self.decoded.append(d)

    def find(self, source: str, msg_type: str, **tags: str) -> Decoded | None:
        with self._lock:
            for d in self.decoded:
                if d.rec.source == source and d.parsed.msg_type == msg_type and all(
                        d.parsed.get(int(t[1:])) == v for t, v in tags.items()):
                    return d
        return None

    def types(self) -> list[tuple[str, str]]:
        with self._lock:
            return [(d.rec.source, d.parsed.msg_type) for d in self.decoded]


def client(comp_id: str, fix_version: str, port: int, seen: Seen, prefix: str) -> Client:
    v = version(fix_version)
    session = ClientSession(comp_id, port=port, begin=v.begin_string)
    c = Client(session, load_version(v.name), prefix=prefix, on_decoded=seen)
    session.on_record = c.on_record
    return c


def named(d: Decoded, tag: int) -> tuple[str, str]:
    f = next(x for x in d.parsed.fields if x.tag == tag)
    return f.name, f.meaning


def test_a_42_and_a_50sp2_terminal_client_trade_named_in_their_versions(stack: Stack) -> None:
    seen42, seen50 = Seen(), Seen()
    c42 = client("CLIENT42-05", "4.2", stack.fix_port, seen42, "v42-")
    c50 = client("CLIENT50-05", "5.0SP2", stack.fix_port, seen50, "v50-")
    with c42.session, c50.session:
        c42.session.wait_logon(5)
        c50.session.wait_logon(5)
        logon50 = seen50.find("client", "A")
        assert logon50 is not None and logon50.parsed.get(8) == "FIXT.1.1"
        assert named(logon50, 1137)[0] == "DefaultApplVerID" and logon50.parsed.get(1137) == "9"
        assert seen42.find("client", "A").parsed.get(8) == "FIX.4.2"  # type: ignore[union-attr]

        assert c42.execute(parse("sell ACORN.LAB 101.10 7")) == []
        eventually(lambda: seen42.find("exchange", "8", t11="v42-1", t150="0"), what="4.2 New")
        assert c50.execute(parse("buy ACORN.LAB 101.10 7")) == []

        fill42 = eventually(lambda: seen42.find("exchange", "8", t11="v42-1", t39="2"), what="4.2 fill")
        fill50 = eventually(lambda: seen50.find("exchange", "8", t11="v50-1", t39="2"), what="5.0 fill")
        # FIX 4.2: ExecType 2 "Fill" with ExecTransType 0 "New"; HandlInst on the order it sent.
        assert named(fill42, 150) == ("ExecType", "Fill")
        assert named(fill42, 20) == ("ExecTransType", "New")
        sent42 = seen42.find("client", "D")
        assert sent42 is not None and named(sent42, 21)[0] == "HandlInst"
        # FIX 5.0 SP2: ExecType F "Trade", TrdMatchID a field of its own, the header FIXT's.
        assert named(fill50, 150) == ("ExecType", "Trade")
        assert named(fill50, 880)[0] == "TrdMatchID"
        assert fill50.parsed.msg_name == "ExecutionReport"
        assert fill42.parsed.get(58) == f"TrdMatchID={fill50.parsed.get(880)}"

        # Each follows its order to Filled, and its fill, from its own version's reports.
        eventually(lambda: not c42.open_orders() and not c50.open_orders(), what="no open orders")
        assert [f.clordid for f in c42.fills] == ["v42-1"]
        assert [f.clordid for f in c50.fills] == ["v50-1"]

        # A status request in 4.2 (no OrdStatusReqID): the answer is ExecTransType 3 "Status".
        assert c42.execute(parse("status 1")) == []
        status = eventually(lambda: seen42.find("exchange", "8", t11="v42-1", t20="3"), what="4.2 status")
        assert named(status, 20) == ("ExecTransType", "Status")
        assert not c42.open_orders()
        # A market-data subscription in 5.0 SP2: the snapshot carries LastUpdateTime, named.
        assert c50.execute(parse("book ACORN.LAB")) == []
        snap = eventually(lambda: seen50.find("exchange", "W"), what="5.0 snapshot")
        assert named(snap, 779)[0] == "LastUpdateTime"

        for seen in (seen42, seen50):
            assert ("client", "3") not in seen.types()  # the stock dictionaries reject nothing
            assert ("exchange", "3") not in seen.types()
            assert all(not d.parsed.problems for d in seen.decoded)


def test_plain_fix_version_picks_its_pool_and_names(stack: Stack) -> None:
    done = subprocess.run([sys.executable, "-m", "services.client", "--plain", "--port", str(stack.fix_port),
                           "--fix-version", "4.2", "--linger", "2"],
                          input="buy ACORN.LAB 101.20 3\nsell ACORN.LAB 101.20 3\nshow 1\n",
                          capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any("-> Logon 35=A #1" in x for x in lines), lines
    assert any("-> NewOrderSingle 35=D" in x and "HandlInst(21)=1" in x for x in lines)
    assert any("<- ExecutionReport 35=8" in x and "ExecType(150)=2 (Fill)" in x
               and "ExecTransType(20)=0 (New)" in x for x in lines)
    assert any("SenderCompID(49)=CLIENT42-" in x for x in lines)  # show 1: the Logon's header
    assert not any("35=3" in x for x in lines)
    assert done.stderr == ""
    bad = subprocess.run([sys.executable, "-m", "services.client", "--plain", "--fix-version", "4.3"],
                         input="", capture_output=True, text=True, timeout=30, cwd=ROOT)
    assert bad.returncode == 2 and "--fix-version" in bad.stderr
