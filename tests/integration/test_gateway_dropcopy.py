"""Drop copy end to end: a real redis-server, matcher and gateway, strict stock QuickFIX clients of
FIX 4.4, 4.2 and 5.0 SP2.

- Every ExecutionReport of a firm's sessions (three of them, one of FIX 5.0 SP2 whose fills carry
  TrdMatchID 880) reaches each of the firm's drop copy sessions (one per version), in the order
  each member read them, with DeliverToCompID (128) naming the member and CopyMsgIndicator 797=Y
  (FIX 4.2 has no 797: 128 alone), and no strict client Rejects anything; another firm's reports
  are not copied.
- A drop copy session may not trade: its orders, cancels, replaces and mass cancels are refused with
  a Text saying why, and none of them reaches the bus.
- What a drop copy session missed while logged out, and the start-up sweep's cancels after the
  gateway was killed -9, it gets at its next Logon to the new gateway process, each copy once.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from services.gateway.guard import DROP_COPY_TEXT
from shared import streams
from shared.redis_server import RedisServer
from tests.gateway_stack import Stack, gateway_stack, matcher_available
from tests.helpers import eventually
from tests.stock_client import StockSession, nos, stock_sessions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]

SESSIONS = """
[FIRM]
Name=ACME
Sessions=ACME01,ACME02
MaxOrderQty=50
[SESSION]
TargetCompID=ACME01
[SESSION]
TargetCompID=ACME02
[SESSION]
BeginString=FIXT.1.1
TargetCompID=ACME50
Firm=ACME
[SESSION]
TargetCompID=ACMEDC
DropCopyFor=ACME
[SESSION]
BeginString=FIX.4.2
TargetCompID=ACMEDC42
DropCopyFor=ACME
[SESSION]
BeginString=FIXT.1.1
TargetCompID=ACMEDC50
DropCopyFor=ACME
[FIRM]
Name=OTHER
Sessions=OTHER01
[SESSION]
TargetCompID=OTHER01
[SESSION]
TargetCompID=OTHERDC
DropCopyFor=OTHER
"""
ENV = {"FIXLAB_MATCHER_BLOCK_MS": "100"}


def sessions_env(tmp: Path) -> dict[str, str]:
    path = tmp / "sessions.cfg"
    path.write_text(SESSIONS)
    return {**ENV, "FIXLAB_FIX_SESSIONS_FILE": str(path)}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with gateway_stack(None, env=sessions_env(tmp_path_factory.mktemp("dropcopy")),
                       gateway_id="gwdc") as s:
        yield s


def reports(s: StockSession) -> list[dict[int, str]]:
    with s.client.lock:
        return [m for m in s.client.received if m.get(35) == "8"]


def place(s: StockSession, clordid: str, side: int, qty: int, price: str, status: str = "0") -> None:
    s.send("D", nos(clordid, side, qty, price, handl_inst=s.begin == "FIX.4.2"))
    s.client.wait("8", lambda m: m.get(11) == clordid and m.get(150) == status)


def clean(*sessions: StockSession) -> None:
    for s in sessions:
        assert s.client.errors == []
        assert s.client.session_rejects() == [], f"{s.comp} rejected what the exchange sent"


def test_every_report_of_a_firms_sessions_reaches_each_drop_copy_in_order(stack: Stack,
                                                                         tmp_path: Path) -> None:
    comps = ["ACME01", "ACME02", "ACME50", "OTHER01", "ACMEDC", "ACMEDC42", "ACMEDC50", "OTHERDC"]
    versions = ["4.4", "4.4", "5.0SP2", "4.4", "4.4", "4.2", "5.0SP2", "4.4"]
    with stock_sessions(tmp_path, stack.fix_port, comps, fix_version=versions) as sessions:
        a, b, c, other, dc44, dc42, dc50, other_dc = sessions
        place(a, "x1", 1, 10, "100.00")
        place(b, "x1", 2, 4, "100.00", "F")  # the same ClOrdID in two sessions: 128 tells them apart
        place(c, "x1", 2, 6, "100.00", "F")  # FIX 5.0 SP2: its fill carries TrdMatchID (880)
        a.client.wait("8", lambda m: m.get(11) == "x1" and m.get(39) == "2")
        place(a, "big", 1, 60, "99.00", "8")  # the firm's MaxOrderQty: refused on the engine thread
        place(b, "x2", 1, 5, "90.00")
        b.send("F", [(41, "x2"), (11, "x2-c"), (55, "ACORN.LAB"), (54, 1), (60, "20260101-00:00:00")])
        b.client.wait("8", lambda m: m.get(11) == "x2-c" and m.get(150) == "4")
        place(other, "o1", 1, 1, "80.00")  # another firm's: copied to its own drop copy only

        members = {s.comp: reports(s) for s in (a, b, c)}
        total = sum(len(v) for v in members.values())
        assert total == 10
        for dc in (dc44, dc42, dc50):
            copies = eventually(lambda d=dc: len(reports(d)) >= total and reports(d),  # type: ignore[misc]
                                timeout=15, what=f"{dc.comp}'s copies")
            assert len(copies) == total, [(m.get(128), m.get(11), m.get(150)) for m in copies]
            for comp, told in members.items():
                # Each member's reports in the order it read them, the same ExecIDs and orders.
                mine = [m for m in copies if m.get(128) == comp]
                assert [(m[17], m[11], m[39]) for m in mine] == [(m[17], m[11], m[39]) for m in told]
            if dc.begin == "FIX.4.2":
                assert all(797 not in m and m.get(20) == "0" for m in copies)  # FIX42.xml has no 797
            else:
                assert all(m.get(797) == "Y" for m in copies)
            assert not any(m.get(11) == "o1" for m in copies)
        refused = next(m for m in reports(dc44) if m[11] == "big")
        assert refused[128] == "ACME01" and "MaxOrderQty of the firm ACME" in refused[58]
        # The member of FIX 5.0 SP2 and its drop copy see 880; the FIX 4.4 drop copy does not.
        fill = next(m for m in members["ACME50"] if m[150] == "F")
        assert 880 in fill and 880 in next(m for m in reports(dc50) if m[17] == fill[17])
        assert 880 not in next(m for m in reports(dc44) if m[17] == fill[17])
        theirs = eventually(lambda: reports(other_dc), what="the other firm's copy")
        assert [(m[128], m[11]) for m in theirs] == [("OTHER01", "o1")]
        clean(*sessions)


def test_a_drop_copy_session_may_not_trade(stack: Stack, tmp_path: Path) -> None:
    with stock_sessions(tmp_path, stack.fix_port, ["ACMEDC", "ACME02"]) as (dc, member):
        dc.send("D", nos("dcx-1", 1, 5, "100.00"))
        er = dc.client.wait("8", lambda m: m.get(11) == "dcx-1")
        assert (er[150], er[39], er[58]) == ("8", "8", DROP_COPY_TEXT)
        dc.send("F", [(41, "dcx-1"), (11, "dcx-2"), (55, "ACORN.LAB"), (54, 1), (60, "20260101-00:00:00")])
        dc.send("G", [(41, "dcx-1"), (11, "dcx-3"), (55, "ACORN.LAB"), (54, 1), (38, 5), (40, 2),
                      (44, "101.00"), (60, "20260101-00:00:00")])
        for clordid, response_to in (("dcx-2", "1"), ("dcx-3", "2")):
            rej = dc.client.wait("9", lambda m, c=clordid: m.get(11) == c)  # type: ignore[misc]
            assert (rej[434], rej[58]) == (response_to, DROP_COPY_TEXT)
        dc.send("q", [(11, "dcx-4"), (530, 7), (60, "20260101-00:00:00")])
        report = dc.client.wait("r", lambda m: m.get(11) == "dcx-4")
        assert (report[531], report[58]) == ("0", DROP_COPY_TEXT)
        # A member's order on the bus shows the search sees orders; none of the drop copy's is there.
        place(member, "dcx-control", 1, 1, "95.00")
        r = redis.Redis.from_url(stack.redis_url)
        try:
            eventually(lambda: bus_holds(r, b"dcx-control"), what="the member's order on the bus")
            assert not any(bus_holds(r, f"dcx-{i}".encode()) for i in range(1, 5))
        finally:
            r.close()
        clean(dc, member)


def bus_holds(r: redis.Redis, needle: bytes, skip: tuple[str, ...] = ()) -> bool:
    """Whether any stream entry on the bus holds ``needle`` (streams named in ``skip`` aside)."""
    for key in r.scan_iter(_type="stream"):
        if key.decode() in skip:
            continue
        for _id, entry in r.xrange(key) or []:
            if any(needle in bytes(value) for value in (entry or {}).values()):
                return True
    return False


@contextlib.contextmanager
def own_redis(tmp: Path) -> Iterator[str]:
    server = RedisServer(tmp / "redis").start()
    try:
        yield server.url
    finally:
        server.stop()


def test_what_it_missed_comes_at_its_next_logon_after_a_kill_9(tmp_path: Path) -> None:
    env = sessions_env(tmp_path)
    with own_redis(tmp_path) as url:
        with (gateway_stack(url, env=env, gateway_id="gwdcr") as first,
              stock_sessions(tmp_path, first.fix_port, ["ACME01"]) as (a,)):
            with stock_sessions(tmp_path, first.fix_port, ["ACMEDC"]) as (dc,):
                place(a, "r1", 1, 3, "91.00")
                live = dc.client.wait("8", lambda m: m.get(11) == "r1")  # live, while logged on
                assert (live[128], live[797], live[150]) == ("ACME01", "Y", "0")
                clean(dc)
            # Logged out: r2's copy waits on the bus.
            place(a, "r2", 2, 3, "120.00")
            r = redis.Redis.from_url(url)
            try:
                eventually(lambda: r.xlen(streams.dropcopy_stream("ACME")) >= 2, what="r2's copy kept")
            finally:
                r.close()
            first.gateway.send_signal(signal.SIGKILL)  # no Logout, no cancels: the next start sweeps
            first.gateway.wait(10)
        with (gateway_stack(url, env=env, gateway_id="gwdcr") as second,
              stock_sessions(tmp_path, second.fix_port, ["ACMEDC"]) as (dc,)):
            want = {("r2", "0"), ("r1", "4"), ("r2", "4")}
            eventually(lambda: want <= {(m[11], m[150]) for m in reports(dc)}, timeout=20,
                       what="the copies missed and the sweep's cancels")
            # A new report behind them: whatever came before it is all that was owed (each once).
            with stock_sessions(tmp_path, second.fix_port, ["ACME01"]) as (a,):
                place(a, "r3", 1, 1, "92.00")
                dc.client.wait("8", lambda m: m.get(11) == "r3")
                got = [(m[11], m[150]) for m in reports(dc)]
            assert got[-1] == ("r3", "0")
            got = got[:-1]
            assert sorted(got) == sorted(want), got
            assert got.index(("r2", "0")) < got.index(("r2", "4"))
            assert all(m[128] == "ACME01" and m[797] == "Y" for m in reports(dc))
            clean(dc)
