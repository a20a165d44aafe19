"""Visitors' commands as FIX fields, and a session's orders followed from its ExecutionReports."""

from __future__ import annotations

import pytest

from shared.fix.orders import (
    CommandError,
    LabOrders,
    is_fill,
    is_unknown_status,
    stp_mode,
    transact_time,
)
from shared.fix.versions import VERSIONS
from shared.schema import LabCommand

TS = 1_767_225_600_123_000_000  # 2026-01-01 00:00:00.123 UTC


def order_cmd(**kw: object) -> LabCommand:
    base: dict[str, object] = {"lab_id": "lab1", "op": "order", "symbol": "ACORN.LAB", "side": 1,
                               "price": "100.50", "qty": 10}
    base.update(kw)
    return LabCommand(**base)  # type: ignore[arg-type]


def test_new_order_fields_keep_the_price_as_typed() -> None:
    orders = LabOrders("lab1-")
    msg_type, body = orders.new_order(order_cmd(price="100.5000"), TS)
    assert msg_type == "D"
    assert body == [(11, "lab1-1"), (55, "ACORN.LAB"), (54, "1"), (60, "20260101-00:00:00.123"),
                    (38, "10"), (40, "2"), (44, "100.5000"), (59, "0")]
    assert [o.status for o in orders.open_orders()] == ["A"]


def test_price_the_exchange_will_refuse_still_goes_out() -> None:
    _, body = LabOrders("p-").new_order(order_cmd(price="abc"), TS)
    assert (44, "abc") in body


@pytest.mark.parametrize(("kw", "text"), [
    ({"price": "1\x0135=A"}, "cannot carry"),
    ({"price": ""}, "price is empty"),
    ({"symbol": "X" * 40}, "longer than"),
    ({"side": 3}, "neither 1"),
    ({"qty": 10**12}, "quantity"),
])
def test_commands_that_would_break_the_wire_are_refused(kw: dict[str, object], text: str) -> None:
    orders = LabOrders("p-")
    with pytest.raises(CommandError, match=text):
        orders.new_order(order_cmd(**kw), TS)
    assert orders.open_orders() == ()


def test_cancel_and_replace_name_the_order_and_new_clordids() -> None:
    orders = LabOrders("p-")
    orders.new_order(order_cmd(side=2, qty=7), TS)
    t, body = orders.cancel(LabCommand("lab1", "cancel", orig_clordid="p-1"), TS)
    assert t == "F"
    assert dict(body)[41] == "p-1" and dict(body)[11] == "p-2" and dict(body)[38] == "7"
    assert dict(body)[54] == "2"
    t, body = orders.replace(LabCommand("lab1", "replace", price="101.00", orig_clordid="p-1"), TS)
    assert t == "G"
    assert dict(body)[44] == "101.00" and dict(body)[38] == "7" and dict(body)[11] == "p-3"


def test_cancel_of_an_unknown_order_is_refused() -> None:
    with pytest.raises(CommandError, match="unknown order 'nope'"):
        LabOrders("p-").cancel(LabCommand("lab1", "cancel", orig_clordid="nope"), TS)
    with pytest.raises(CommandError, match="needs the ClOrdID"):
        LabOrders("p-").replace(LabCommand("lab1", "replace"), TS)


def test_execution_reports_drive_status_cum_and_leaves() -> None:
    orders = LabOrders("p-")
    orders.new_order(order_cmd(qty=10), TS)
    orders.on_execution_report({11: "p-1", 150: "0", 39: "0", 14: "0", 151: "10", 44: "100.5", 38: "10"})
    (o,) = orders.open_orders()
    assert (o.status, o.cum_qty, o.leaves_qty, o.price) == ("0", 0, 10, "100.5")
    orders.on_execution_report({11: "p-1", 150: "F", 39: "1", 14: "4", 151: "6"})
    (o,) = orders.open_orders()
    assert (o.status, o.cum_qty, o.leaves_qty) == ("1", 4, 6)
    orders.on_execution_report({11: "p-1", 150: "F", 39: "2", 14: "10", 151: "0"})
    assert orders.open_orders() == ()
    assert orders.known("p-1")  # a filled order can still be named (the exchange answers 35=9)


def test_replace_moves_the_order_to_its_new_clordid_and_cancel_closes_it() -> None:
    orders = LabOrders("p-")
    orders.new_order(order_cmd(qty=10), TS)
    orders.on_execution_report({11: "p-1", 150: "0", 39: "0", 14: "0", 151: "10"})
    orders.replace(LabCommand("lab1", "replace", qty=5, orig_clordid="p-1"), TS)
    orders.on_execution_report({11: "p-2", 41: "p-1", 150: "5", 39: "5", 14: "0", 151: "5", 38: "5",
                                44: "100.5"})
    (o,) = orders.open_orders()
    assert (o.clordid, o.qty, o.leaves_qty, o.status) == ("p-2", 5, 5, "5")
    assert not orders.known("p-1")
    orders.on_execution_report({11: "p-3", 41: "p-2", 150: "4", 39: "4", 14: "0", 151: "0"})
    assert orders.open_orders() == ()


def test_rejected_order_leaves_the_open_list() -> None:
    orders = LabOrders("p-")
    orders.new_order(order_cmd(price="abc"), TS)
    orders.on_execution_report({11: "p-1", 150: "8", 39: "8", 14: "0", 151: "0", 58: "bad price"})
    assert orders.open_orders() == ()


def test_transact_time_has_milliseconds() -> None:
    assert transact_time(TS) == "20260101-00:00:00.123"


def test_time_in_force_goes_into_tag_59_and_a_replace_keeps_it() -> None:
    orders = LabOrders("p-")
    for tif in (0, 1, 3, 4):
        _, body = orders.new_order(order_cmd(tif=tif), TS)
        assert dict(body)[59] == str(tif)
    _, body = orders.replace(LabCommand("lab1", "replace", price="99", orig_clordid="p-3"), TS)  # the IOC one
    assert dict(body)[59] == "3"
    with pytest.raises(CommandError, match="TimeInForce 6"):
        orders.new_order(order_cmd(tif=6), TS)


def test_status_request_names_the_order_and_its_order_id_once_known() -> None:
    orders = LabOrders("p-")
    orders.new_order(order_cmd(side=2), TS)
    t, body = orders.status(LabCommand("lab1", "status", orig_clordid="p-1"))
    assert t == "H"
    assert [tag for tag, _ in body] == [11, 55, 54, 790]  # no OrderID before the exchange gave one
    assert dict(body)[11] == "p-1" and dict(body)[54] == "2" and dict(body)[55] == "ACORN.LAB"
    orders.on_execution_report({11: "p-1", 37: "O-77", 39: "0", 150: "0", 14: "0", 151: "10"})
    _, body = orders.status(LabCommand("lab1", "status", orig_clordid="p-1"))
    assert body[:2] == [(11, "p-1"), (37, "O-77")]
    with pytest.raises(CommandError, match="unknown order"):
        orders.status(LabCommand("lab1", "status", orig_clordid="nope"))


def test_a_status_answer_for_an_unknown_order_changes_nothing() -> None:
    orders = LabOrders("p-")
    orders.new_order(order_cmd(), TS)
    orders.on_execution_report({11: "p-1", 37: "O-1", 39: "0", 150: "0", 14: "0", 151: "10"})
    orders.on_execution_report({11: "p-1", 37: "NONE", 39: "8", 150: "I", 58: "unknown order"})
    orders.on_execution_report({11: "ghost", 37: "NONE", 39: "8", 150: "I", 58: "unknown order"})
    assert [(o.clordid, o.status) for o in orders.open_orders()] == [("p-1", "0")]
    orders.on_execution_report({11: "p-1", 37: "O-1", 39: "0", 150: "I", 14: "0", 151: "10"})
    assert [(o.clordid, o.status) for o in orders.open_orders()] == [("p-1", "0")]


def test_mass_cancel_all_or_one_symbol() -> None:
    orders = LabOrders("p-")
    t, body = orders.mass_cancel(LabCommand("lab1", "mass_cancel"), TS)
    assert t == "q" and body == [(11, "p-1"), (530, "7"), (60, "20260101-00:00:00.123")]
    _, body = orders.mass_cancel(LabCommand("lab1", "mass_cancel", symbol="BIRCH.LAB"), TS)
    assert body == [(11, "p-2"), (530, "1"), (55, "BIRCH.LAB"), (60, "20260101-00:00:00.123")]


def test_market_data_request_subscribes_with_groups_and_unsubscribes_with_the_same_id() -> None:
    orders = LabOrders("p-")
    t, body = orders.md_subscribe(LabCommand("lab1", "md_subscribe", symbol="ACORN.LAB", value="0"))
    assert t == "V"
    req_id = dict(body)[262]
    assert body == [(262, req_id), (263, "1"), (264, "0"), (265, "1"),
                    (267, [[(269, "0")], [(269, "1")], [(269, "2")]]), (146, [[(55, "ACORN.LAB")]])]
    with pytest.raises(CommandError, match=r"already subscribed to ACORN\.LAB"):
        orders.md_subscribe(LabCommand("lab1", "md_subscribe", symbol="ACORN.LAB"))
    t, body = orders.md_unsubscribe(LabCommand("lab1", "md_unsubscribe", symbol="ACORN.LAB"))
    assert t == "V" and dict(body)[262] == req_id and dict(body)[263] == "2"
    with pytest.raises(CommandError, match="not subscribed"):
        orders.md_unsubscribe(LabCommand("lab1", "md_unsubscribe", symbol="ACORN.LAB"))
    with pytest.raises(CommandError, match="MarketDepth"):
        orders.md_subscribe(LabCommand("lab1", "md_subscribe", symbol="ACORN.LAB", value="x"))


def test_a_rejected_subscription_is_forgotten() -> None:
    orders = LabOrders("p-")
    _, body = orders.md_subscribe(LabCommand("lab1", "md_subscribe", symbol="NOPE.LAB"))
    orders.on_md_reject({262: str(dict(body)[262]), 281: "0", 58: "unknown symbol"})
    assert orders.subscriptions == {}
    orders.md_subscribe(LabCommand("lab1", "md_subscribe", symbol="NOPE.LAB"))  # may ask again


def test_stp_mode_values() -> None:
    assert [stp_mode(v) for v in ("0", "1", "2", "3")] == [0, 1, 2, 3]
    for bad in ("4", "", "-1", "off"):
        with pytest.raises(CommandError, match="self-trade prevention mode"):
            stp_mode(bad)


def test_fix42_orders_carry_handlinst_and_follow_exectype_1_2_and_status() -> None:
    orders = LabOrders("p-", VERSIONS["4.2"])
    _, body = orders.new_order(order_cmd(), TS)
    assert body[:2] == [(11, "p-1"), (21, "1")]
    orders.on_execution_report({11: "p-1", 37: "o1", 20: "0", 150: "0", 39: "0", 14: "0", 151: "10"})
    _, body = orders.replace(LabCommand("lab1", "replace", orig_clordid="p-1", qty=8), TS)
    assert (21, "1") in body
    _, body = orders.status(LabCommand("lab1", "status", orig_clordid="p-1"))
    assert 790 not in dict(body)  # OrdStatusReqID came with FIX 4.3
    partial = {11: "p-1", 20: "0", 150: "1", 39: "1", 14: "4", 151: "6"}
    assert is_fill(partial)
    orders.on_execution_report(partial)
    assert [(o.cum_qty, o.leaves_qty, o.status) for o in orders.open_orders()] == [(4, 6, "1")]
    status_answer = {11: "p-1", 20: "3", 150: "1", 39: "1", 14: "4", 151: "6"}
    assert not is_fill(status_answer)  # ExecTransType 3: the order's state, not a new fill
    assert is_unknown_status({11: "x", 20: "3", 150: "8", 39: "8"})
    assert not is_unknown_status({11: "x", 20: "0", 150: "8", 39: "8"})  # a rejected order
    orders.on_execution_report({11: "p-1", 20: "0", 150: "2", 39: "2", 14: "10", 151: "0"})
    assert orders.open_orders() == ()


def test_fix44_fills_are_exectype_f_only() -> None:
    assert is_fill({150: "F", 39: "1"})
    assert not is_fill({150: "1", 39: "1"})  # 4.4 has no ExecTransType: never a 4.2 fill
