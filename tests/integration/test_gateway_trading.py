"""Orders through the real gateway and matcher processes, over real FIX sessions on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.gateway_stack import FixClient, Stack, fix_now, gateway_stack, matcher_available, order

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    # A private Redis: the shared one is flushed between tests, which would pull the bus from under
    # the matcher this module keeps running.
    with gateway_stack(None) as s:
        yield s


def client(stack: Stack, comp: str) -> FixClient:
    return FixClient(stack.fix_port, comp)


def er(c: FixClient, clordid: str, exec_type: str) -> dict[int, str]:
    return c.expect("8", lambda m: m.get(11) == clordid and m.get(150) == exec_type)


def test_order_new_then_trade_gives_both_sides_a_fill_with_one_match_id(stack: Stack) -> None:
    with client(stack, "CLIENT01") as buyer, client(stack, "CLIENT02") as seller:
        buyer.send("D", order("t1-b", 1, 10, "101.00"))
        new = er(buyer, "t1-b", "0")
        assert (new[39], new[151], new[14], new[6], new[44]) == ("0", "10", "0", "0", "101.00")
        assert new[55] == "ACORN.LAB"
        assert new[37] != "NONE" and new[17]
        seller.send("D", order("t1-s", 2, 10, "101.00"))
        er(seller, "t1-s", "0")
        sell_fill = er(seller, "t1-s", "F")
        buy_fill = er(buyer, "t1-b", "F")
        assert sell_fill[527] == buy_fill[527] and sell_fill[527]  # one trade, one match id
        assert 880 not in sell_fill  # TrdMatchID only for sessions that ask for it
        for fill in (sell_fill, buy_fill):
            assert (fill[39], fill[31], fill[32], fill[14], fill[151], fill[6]) == (
                "2", "101.00", "10", "10", "0", "101.00")
        assert buy_fill[37] == new[37]
        assert sell_fill[17] != buy_fill[17]


def test_partial_fill(stack: Stack) -> None:
    with client(stack, "CLIENT03") as buyer, client(stack, "CLIENT04") as seller:
        buyer.send("D", order("p1-b", 1, 10, "102.00"))
        er(buyer, "p1-b", "0")
        seller.send("D", order("p1-s", 2, 4, "102.00"))
        part = er(buyer, "p1-b", "F")
        assert (part[39], part[32], part[14], part[151], part[38]) == ("1", "4", "4", "6", "10")
        assert er(seller, "p1-s", "F")[39] == "2"


def test_cancel_and_cancel_of_a_filled_order(stack: Stack) -> None:
    with client(stack, "CLIENT05") as c, client(stack, "CLIENT06") as other:
        c.send("D", order("c1", 1, 5, "90.00"))
        er(c, "c1", "0")
        c.send("F", [(41, "c1"), (11, "c1-x"), (55, "ACORN.LAB"), (54, 1), (60, fix_now())])
        done = er(c, "c1-x", "4")
        assert (done[39], done[41], done[151], done[14]) == ("4", "c1", "0", "0")
        # A filled order cannot be cancelled: OrderCancelReject with the order's status.
        c.send("D", order("c2", 1, 3, "90.50"))
        er(c, "c2", "0")
        other.send("D", order("c2-s", 2, 3, "90.50"))
        er(c, "c2", "F")
        c.send("F", [(41, "c2"), (11, "c2-x"), (55, "ACORN.LAB"), (54, 1), (60, fix_now())])
        rej = c.expect("9", lambda m: m.get(11) == "c2-x")
        assert (rej[41], rej[434], rej[39]) == ("c2", "1", "2")
        assert rej[58] and rej[102] in ("0", "1", "99")
        # And an order nobody knows.
        c.send("F", [(41, "nope"), (11, "c3-x"), (55, "ACORN.LAB"), (54, 1), (60, fix_now())])
        unknown = c.expect("9", lambda m: m.get(11) == "c3-x")
        assert unknown[102] == "1" and unknown[434] == "1"


def test_replace(stack: Stack) -> None:
    with client(stack, "CLIENT07") as c:
        c.send("D", order("r1", 1, 5, "91.00"))
        er(c, "r1", "0")
        c.send("G", [(41, "r1"), (11, "r2"), (55, "ACORN.LAB"), (54, 1), (60, fix_now()), (38, 7), (40, 2),
                     (44, "91.50")])
        rep = er(c, "r2", "5")
        assert (rep[41], rep[44], rep[38], rep[151], rep[39]) == ("r1", "91.50", "7", "7", "0")
        # A replace the gateway refuses itself (off the tick grid) is an OrderCancelReject for a replace.
        c.send("G", [(41, "r2"), (11, "r3"), (55, "ACORN.LAB"), (54, 1), (60, fix_now()), (38, 7), (40, 2),
                     (44, "91.505")])
        rej = c.expect("9", lambda m: m.get(11) == "r3")
        assert rej[434] == "2" and "ticks" in rej[58]


@pytest.mark.parametrize(("fields", "reason", "text"), [
    ({44: "130.00"}, "99", "outside"),  # matcher: 20% band
    ({38: 1001}, "13", "quantity"),  # matcher: 1..1000 units
    ({55: "ELM.LAB"}, "1", "unknown symbol"),  # gateway
    ({44: "100.001"}, "99", "ticks"),  # gateway
    ({40: "P"}, "99", "OrdType 40=P is not accepted"),  # gateway: pegged
    ({40: 3}, "99", "no meaning on a stop order"),  # gateway: a stop has StopPx (99), not Price
    ({40: 4}, "99", "needs a StopPx (99)"),  # gateway
    ({59: 6}, "99", "TimeInForce"),  # gateway: GTD (6) is not offered
    ({38: -5}, "13", "OrderQty 38=-5"),  # gateway
])
def test_each_reject_reason(stack: Stack, fields: dict[int, object], reason: str, text: str) -> None:
    with client(stack, "CLIENT08") as c:
        body = dict(order("bad", 1, 5, "100.00"))
        body.update(fields)
        c.send("D", list(body.items()))
        rej = er(c, "bad", "8")
        assert (rej[39], rej[103]) == ("8", reason) and text in rej[58]


def test_duplicate_clordid_and_too_many_open_orders(stack: Stack) -> None:
    with client(stack, "CLIENT09") as c:
        c.send("D", order("dup", 1, 1, "80.00"))
        er(c, "dup", "0")
        c.send("D", order("dup", 1, 1, "80.00"))
        assert er(c, "dup", "8")[103] == "6"
        for i in range(19):
            c.send("D", order(f"open{i}", 1, 1, "80.00"))
            er(c, f"open{i}", "0")
        c.send("D", order("open20", 1, 1, "80.00"))
        assert er(c, "open20", "8")[103] == "3"


def test_logout_cancels_resting_orders(stack: Stack) -> None:
    with client(stack, "CLIENT10") as gone:
        gone.send("D", order("gone1", 1, 5, "95.00"))
        er(gone, "gone1", "0")
        gone.logout()
    with client(stack, "CLIENT11") as c:
        # If gone1 still rested, this sell would trade with it at once; it rests instead and then
        # trades with this session's own buy (no self-trade prevention here).
        c.send("D", order("s1", 2, 5, "95.00"))
        er(c, "s1", "0")
        c.send("D", order("b1", 1, 5, "95.00"))
        fill = er(c, "b1", "F")
        assert fill[39] == "2"
        assert er(c, "s1", "F")[527] == fill[527]


def test_other_application_messages_get_a_business_message_reject(stack: Stack) -> None:
    with client(stack, "CLIENT12") as c:
        # OrderMassStatusRequest: valid FIX 4.4 the exchange does not take (H is answered since issue 14).
        c.send("AF", [(584, "q1"), (585, 7)])
        rej = c.expect("j")
        assert (rej[372], rej[380]) == ("AF", "3")
