"""FIX 4.2 and FIXT.1.1 / FIX 5.0 SP2 sessions beside FIX 4.4 on the same acceptor (issue 25).

A strict stock FIX 4.2 client (QuickFIX with the installed FIX42.xml) and a strict stock FIX 5.0 SP2
client (FIXT11.xml + FIX50SP2.xml) trade with each other: each gets its own fill in its own dialect,
with the same match id, and market data (W, X, Y) in its own; neither sends a session Reject. Bad
input per version gets the engine's own refusal and the session goes on. (The whole matrix of
ExecutionReports, 9, 3, j, r, y per version: test_gateway_stock_client.py.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway_stack import FixClient, Stack, gateway_stack, matcher_available, order
from tests.helpers import eventually
from tests.integration.test_gateway_marketdata import MDClient, send_v, v
from tests.stock_client import nos, stock_sessions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with gateway_stack(None) as s:
        yield s


def test_a_42_and_a_50sp2_client_trade_each_in_its_own_dialect(stack: Stack, tmp_path: Path) -> None:
    with stock_sessions(tmp_path, stack.fix_port, ["CLIENT42-03", "CLIENT50-03"], app=MDClient,
                        fix_version=["4.2", "5.0SP2"]) as (s42, s50):
        c42, c50 = s42.client, s50.client
        assert isinstance(c42, MDClient) and isinstance(c50, MDClient)
        # Both subscribe to ACORN.LAB's book (W at once), then the 4.2 client rests a bid.
        send_v(s42, v("md42", symbols=("ACORN.LAB",)))
        send_v(s50, v("md50", symbols=("ACORN.LAB",)))
        c42.wait("W", lambda m: m.get(262) == "md42")
        c50.wait("W", lambda m: m.get(262) == "md50")
        s42.send("D", nos("x42-1", 1, 10, "98.00", handl_inst=True))
        new = c42.wait("8", lambda m: m.get(11) == "x42-1" and m.get(150) == "0")
        assert new[20] == "0"  # ExecTransType New
        s50.send("D", nos("x50-1", 2, 4, "98.00"))
        fill42 = c42.wait("8", lambda m: m.get(11) == "x42-1" and m.get(150) == "1")
        fill50 = c50.wait("8", lambda m: m.get(11) == "x50-1" and m.get(150) == "F")
        assert (fill42[39], fill42[32], fill50[39], fill50[32]) == ("1", "4", "2", "4")
        # The same match id: 4.2 has no field for it but Text; 5.0 SP2 has SecondaryExecID and TrdMatchID.
        assert 527 not in fill42 and 880 not in fill42
        assert fill42[58] == f"TrdMatchID={fill50[880]}" and fill50[880] == fill50[527]
        # The trade and the book's change reach both subscribers as X; an unknown symbol gets Y.
        def traded(client: MDClient, req: str) -> bool:
            return any("\x0135=X\x01" in t and f"\x01262={req}\x01" in t and "\x01269=2\x01" in t
                       for t in client.messages())

        eventually(lambda: traded(c42, "md42") and traded(c50, "md50"), what="an X with the trade for each")
        send_v(s42, v("bad42", symbols=("NOPE.LAB",)))
        send_v(s50, v("bad50", symbols=("NOPE.LAB",)))
        assert c42.wait("Y", lambda m: m.get(262) == "bad42")[281] == "0"
        assert c50.wait("Y", lambda m: m.get(262) == "bad50")[281] == "0"
        # The 4.2 client's status request: ExecTransType Status, ExecType its state.
        s42.send("H", [(11, "x42-1"), (55, "ACORN.LAB"), (54, 1)])
        status = c42.wait("8", lambda m: m.get(11) == "x42-1" and m.get(20) == "3")
        assert (status[150], status[39], status[14]) == ("1", "1", "4")
        s42.send("F", [(41, "x42-1"), (11, "x42-2"), (55, "ACORN.LAB"), (54, 1), (60, new[60])])
        c42.wait("8", lambda m: m.get(11) == "x42-2" and m.get(150) == "4")
        # IOC (59=3) and FOK (59=4) that cannot trade: cancelled at once, each in its own dialect.
        def tif(body: list[tuple[int, object]], value: int) -> list[tuple[int, object]]:
            return [(59, value) if tag == 59 else (tag, v) for tag, v in body]

        s42.send("D", tif(nos("x42-3", 1, 1, "90.00", handl_inst=True), 3))
        s50.send("D", tif(nos("x50-2", 2, 500, "110.00"), 4))
        assert c42.wait("8", lambda m: m.get(11) == "x42-3" and m.get(150) == "4")[20] == "0"
        assert c50.wait("8", lambda m: m.get(11) == "x50-2" and m.get(150) == "4")[39] == "4"
    for client in (c42, c50):
        assert client.errors == []
        assert client.session_rejects() == [], "a stock client rejected what the exchange sent"


def test_bad_input_per_version_gets_the_engines_refusal_and_the_session_goes_on(stack: Stack) -> None:
    port = stack.fix_port
    # FIX 4.2: a field FIX 4.4 added (OrdStatusReqID in H), a message FIX 4.4 added (q): Rejects.
    with FixClient(port, "CLIENT42-04", begin="FIX.4.2") as c:
        c.send("H", [(11, "h1"), (55, "ACORN.LAB"), (54, 1), (790, "r1")])
        rej = c.expect("3")
        assert (rej[371], rej[373], rej[58]) == ("790", "0", "Invalid tag number")
        c.send("q", [(11, "mc1"), (530, 7), (60, "20260101-00:00:00")])
        assert c.expect("3")[373] == "11"  # Invalid MsgType
        c.send("D", [(21, 1), *order("ok42", 1, 1, "90.00")])
        assert c.expect("8", lambda m: m.get(11) == "ok42")[150] == "0"
        # A FIX 4.4 message on the FIX 4.2 session: the engine logs it out.
        c.send_raw(c.message("D", [(21, 1), *order("b44", 1, 1, "90.00")], begin="FIX.4.4"), counts=True)
        assert c.expect("5")[58] == "Incorrect BeginString"
        assert c.closed()
    with FixClient(port, "CLIENT42-04", begin="FIX.4.2") as c:  # and logs on again, sound
        c.send("D", [(21, 1), *order("ok42b", 1, 1, "90.00")])
        assert c.expect("8", lambda m: m.get(11) == "ok42b")[150] == "0"
    # FIXT.1.1: a Logon without DefaultApplVerID: the engine closes the connection ("Required field
    # missing from logon" in its event log; it never reaches the application to say more).
    c = FixClient(port, "CLIENT50-04", begin="FIXT.1.1", logon=False)
    c.send("A", [(98, 0), (108, 30), (141, "Y")])
    assert c.read_message(5) is None
    c.close()
    # Another DefaultApplVerID (FIX.5.0, 7): a Logout saying which this exchange speaks.
    c = FixClient(port, "CLIENT50-04", begin="FIXT.1.1", logon=False)
    c.send("A", [(98, 0), (108, 30), (141, "Y"), (1137, 7)])
    logout = c.expect("5")
    assert "1137=7" in logout[58] and "1137=9" in logout[58]
    assert c.closed()
    c.close()
    with FixClient(port, "CLIENT50-04", begin="FIXT.1.1", logon_extra=[(1137, 9)]) as c:
        # A message naming another ApplVerID (1128) in its header: the engine's session Reject.
        c.send("D", [(1128, 7), *order("a50", 1, 1, "90.00")])
        rej = c.expect("3")
        assert (rej[371], rej[373]) == ("1128", "5")
        c.send("D", order("ok50", 1, 1, "90.00"))
        assert c.expect("8", lambda m: m.get(11) == "ok50")[150] == "0"
        c.logout()
