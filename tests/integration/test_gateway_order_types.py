"""IOC, FOK and self-trade prevention over real QuickFIX sessions, to a strict stock FIX 4.4 client.

The client is test_gateway_stock_client's: QuickFIX with the installed FIX44.xml and every validation
switch on; it must take every report (no session Reject) and its application must see each one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway_stack import Stack, gateway_stack, matcher_available
from tests.stock_client import nos, stock_sessions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]

STP_COMP, OTHER_COMP = "STPX01", "CLIENT11"


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    sessions = tmp_path / "sessions.cfg"
    sessions.write_text(f"[SESSION]\nTargetCompID={STP_COMP}\nSelfTradePrevention=CancelResting\n")
    with gateway_stack(None, env={"FIXLAB_FIX_SESSIONS_FILE": str(sessions)}) as s:
        yield s


def order(clordid: str, side: int, qty: int, price: str, tif: int) -> list[tuple[int, object]]:
    return [(t, tif if t == 59 else v) for t, v in nos(clordid, side, qty, price)]


def test_ioc_fok_and_self_trade_prevention_reach_a_stock_client(stack: Stack, tmp_path: Path) -> None:
    with stock_sessions(tmp_path, stack.fix_port, [STP_COMP, OTHER_COMP]) as (ss, so):
        s, o = ss.client, so.client

        # STPX rests 2, then another session rests 5, both selling at 99.50.
        ss.send("D", order("s-1", 2, 2, "99.50", 0))
        s.wait("8", lambda m: m.get(11) == "s-1" and m.get(150) == "0")
        so.send("D", order("o-1", 2, 5, "99.50", 0))
        o.wait("8", lambda m: m.get(11) == "o-1" and m.get(150) == "0")

        # An IOC buy of 10 from STPX: New (59=3); its own resting sell cancelled (self-trade
        # prevention, cancel resting, with the reason); 5 traded with the other session; the rest
        # cancelled with the reason.
        ss.send("D", order("s-2", 1, 10, "99.50", 3))
        new = s.wait("8", lambda m: m.get(11) == "s-2" and m.get(150) == "0")
        assert new[59] == "3"
        own = s.wait("8", lambda m: m.get(11) == "s-1" and m.get(150) == "4")
        assert own[39] == "4" and own[58].startswith("self-trade prevention")
        fill = s.wait("8", lambda m: m.get(11) == "s-2" and m.get(150) == "F")
        assert (fill[32], fill[39], fill[151]) == ("5", "1", "5")
        rest = s.wait("8", lambda m: m.get(11) == "s-2" and m.get(150) == "4")
        assert (rest[39], rest[14], rest[151], rest[58]) == ("4", "5", "0", "IOC: remainder cancelled")
        o.wait("8", lambda m: m.get(11) == "o-1" and m.get(150) == "F" and m.get(39) == "2")

        # A FOK that cannot fill completely: New, then Cancelled with the reason, nothing traded.
        so.send("D", order("o-2", 2, 3, "99.60", 0))
        o.wait("8", lambda m: m.get(11) == "o-2" and m.get(150) == "0")
        ss.send("D", order("s-3", 1, 4, "99.60", 4))
        s.wait("8", lambda m: m.get(11) == "s-3" and m.get(150) == "0" and m.get(59) == "4")
        kill = s.wait("8", lambda m: m.get(11) == "s-3" and m.get(150) == "4")
        assert kill[14] == "0" and kill[58].startswith("FOK:")
        # One that can: filled at once.
        ss.send("D", order("s-4", 1, 3, "99.60", 4))
        assert s.wait("8", lambda m: m.get(11) == "s-4" and m.get(150) == "F")[39] == "2"

        # Unsupported TimeInForce values: a rejected ExecutionReport saying what is supported.
        ss.send("D", order("s-t0", 1, 1, "99.00", 6))
        rej = s.wait("8", lambda m: m.get(11) == "s-t0" and m.get(150) == "8")
        assert "is not supported" in rej[58] and "3 (IOC), 4 (FOK) or 7 (At the Close)" in rej[58]
        # At the Opening (59=2) is offered now, in the opening call only: refused in continuous trading.
        ss.send("D", order("s-t1", 1, 1, "99.00", 2))
        rej = s.wait("8", lambda m: m.get(11) == "s-t1" and m.get(150) == "8")
        assert "opening call only" in rej[58]
        # A replace asking for IOC: OrderCancelReject.
        ss.send("D", order("s-5", 1, 1, "90.00", 1))
        s.wait("8", lambda m: m.get(11) == "s-5" and m.get(150) == "0")
        now = time.strftime("%Y%m%d-%H:%M:%S", time.gmtime())
        ss.send("G", [(41, "s-5"), (11, "s-6"), (55, "ACORN.LAB"), (54, 1), (60, now), (38, 1),
                                    (40, 2), (44, "90.00"), (59, 3)])
        cxl = s.wait("9", lambda m: m.get(11) == "s-6")
        assert cxl[434] == "2" and "not accepted on a replace" in cxl[58]
    for client in (s, o):
        assert client.errors == []
        assert client.session_rejects() == [], "the stock client rejected what the exchange sent"
