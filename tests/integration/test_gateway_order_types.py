"""IOC, FOK and self-trade prevention over real QuickFIX sessions, to a strict stock FIX 4.4 client.

The client is test_gateway_stock_client's: QuickFIX with the installed FIX44.xml and every validation
switch on; it must take every report (no session Reject) and its application must see each one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import quickfix as fix

from tests.gateway_stack import Stack, gateway_stack, matcher_available
from tests.integration.test_gateway_stock_client import StockClient, nos, raw, stock_settings

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
    s, o = StockClient(), StockClient()
    ini_s = fix.SocketInitiator(s, fix.MemoryStoreFactory(),
                                stock_settings(tmp_path / "s.cfg", stack.fix_port, [STP_COMP]))
    ini_o = fix.SocketInitiator(o, fix.MemoryStoreFactory(),
                                stock_settings(tmp_path / "o.cfg", stack.fix_port, [OTHER_COMP]))
    ini_s.start()
    ini_o.start()
    try:
        assert s.logged_on.wait(15) and o.logged_on.wait(15)
        s_sid = fix.SessionID("FIX.4.4", STP_COMP, "FIXLAB")
        o_sid = fix.SessionID("FIX.4.4", OTHER_COMP, "FIXLAB")

        def send(comp: str, sid: fix.SessionID, msg_type: str, body: list[tuple[int, object]]) -> None:
            assert fix.Session.sendToTarget(raw(comp, body, msg_type), sid)

        # STPX rests 2, then another session rests 5, both selling at 99.50.
        send(STP_COMP, s_sid, "D", order("s-1", 2, 2, "99.50", 0))
        s.wait("8", lambda m: m.get(11) == "s-1" and m.get(150) == "0")
        send(OTHER_COMP, o_sid, "D", order("o-1", 2, 5, "99.50", 0))
        o.wait("8", lambda m: m.get(11) == "o-1" and m.get(150) == "0")

        # An IOC buy of 10 from STPX: New (59=3); its own resting sell cancelled (self-trade
        # prevention, cancel resting, with the reason); 5 traded with the other session; the rest
        # cancelled with the reason.
        send(STP_COMP, s_sid, "D", order("s-2", 1, 10, "99.50", 3))
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
        send(OTHER_COMP, o_sid, "D", order("o-2", 2, 3, "99.60", 0))
        o.wait("8", lambda m: m.get(11) == "o-2" and m.get(150) == "0")
        send(STP_COMP, s_sid, "D", order("s-3", 1, 4, "99.60", 4))
        s.wait("8", lambda m: m.get(11) == "s-3" and m.get(150) == "0" and m.get(59) == "4")
        kill = s.wait("8", lambda m: m.get(11) == "s-3" and m.get(150) == "4")
        assert kill[14] == "0" and kill[58].startswith("FOK:")
        # One that can: filled at once.
        send(STP_COMP, s_sid, "D", order("s-4", 1, 3, "99.60", 4))
        assert s.wait("8", lambda m: m.get(11) == "s-4" and m.get(150) == "F")[39] == "2"

        # Unsupported TimeInForce values: a rejected ExecutionReport saying what is supported.
        for k, tif in enumerate((2, 6)):
            send(STP_COMP, s_sid, "D", order(f"s-t{k}", 1, 1, "99.00", tif))
            rej = s.wait("8", lambda m, k=k: m.get(11) == f"s-t{k}" and m.get(150) == "8")
            assert "3 (IOC) or 4 (FOK)" in rej[58]
        # A replace asking for IOC: OrderCancelReject.
        send(STP_COMP, s_sid, "D", order("s-5", 1, 1, "90.00", 1))
        s.wait("8", lambda m: m.get(11) == "s-5" and m.get(150) == "0")
        now = time.strftime("%Y%m%d-%H:%M:%S", time.gmtime())
        send(STP_COMP, s_sid, "G", [(41, "s-5"), (11, "s-6"), (55, "ACORN.LAB"), (54, 1), (60, now), (38, 1),
                                    (40, 2), (44, "90.00"), (59, 3)])
        cxl = s.wait("9", lambda m: m.get(11) == "s-6")
        assert cxl[434] == "2" and "not accepted on a replace" in cxl[58]
    finally:
        ini_s.stop()
        ini_o.stop()
    for client in (s, o):
        assert client.errors == []
        assert client.session_rejects() == [], "the stock client rejected what the exchange sent"
