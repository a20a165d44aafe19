"""The WebSocket command schema: every malformed command is a CommandError with a clear text."""

from __future__ import annotations

import json

import pytest

from services.web.commands import Command, CommandError, parse_command

MAX = 2048


def cmd(obj: object) -> Command:
    return parse_command(json.dumps(obj), MAX)


def test_valid_commands() -> None:
    assert cmd({"op": "logon"}) == Command("logon")
    assert cmd({"op": "logon", "version": "4.2"}) == Command("logon", value="4.2")
    assert cmd({"op": "logon", "version": "5.0SP2"}).value == "5.0SP2"
    o = cmd({"op": "order", "symbol": "ACORN.LAB", "side": "buy", "price": "100.25", "qty": 10, "id": 7})
    assert (o.op, o.symbol, o.side, o.price, o.qty, o.id) == ("order", "ACORN.LAB", 1, "100.25", 10, "7")
    assert cmd({"op": "order", "symbol": "B", "side": "sell", "price": 25, "qty": "3"}).side == 2
    assert cmd({"op": "cancel", "clordid": "abc-1"}).clordid == "abc-1"
    r = cmd({"op": "replace", "clordid": "abc-1", "price": "99.5", "qty": 4})
    assert (r.price, r.qty) == ("99.5", 4)
    for op in ("drop_next", "silent", "talk", "logout", "ping"):
        assert cmd({"op": op}).op == op


@pytest.mark.parametrize(("frame", "needle"), [
    ("not json", "not JSON"),
    ("[1,2]", "JSON object"),
    ('"logon"', "JSON object"),
    ("{}", "unknown op"),
    ('{"op": "explode"}', "unknown op"),
    ('{"op": 5}', "unknown op"),
    ('{"op": "logon", "extra": 1}', "does not take extra"),
    ('{"op": "order", "symbol": "ACORN.LAB"}', "needs"),
    ('{"op": "order", "symbol": "<img>", "side": "buy", "price": "1", "qty": 1}', "symbol"),
    ('{"op": "order", "symbol": "ACORN.LAB", "side": "up", "price": "1", "qty": 1}', "side"),
    ('{"op": "order", "symbol": "ACORN.LAB", "side": "buy", "price": "-1", "qty": 1}', "price"),
    ('{"op": "order", "symbol": "ACORN.LAB", "side": "buy", "price": "1e5", "qty": 1}', "price"),
    ('{"op": "order", "symbol": "ACORN.LAB", "side": "buy", "price": true, "qty": 1}', "price"),
    ('{"op": "order", "symbol": "ACORN.LAB", "side": "buy", "price": "1", "qty": 0}', "qty"),
    ('{"op": "order", "symbol": "ACORN.LAB", "side": "buy", "price": "1", "qty": 1.5}', "qty"),
    ('{"op": "order", "symbol": "ACORN.LAB", "side": "buy", "price": "1", "qty": "ten"}', "qty"),
    ('{"op": "order", "symbol": "ACORN.LAB", "side": "buy", "price": "1", "qty": 99999999999}', "qty"),
    ('{"op": "cancel", "clordid": "a b"}', "clordid"),
    ('{"op": "cancel", "clordid": "a\\u0001b"}', "clordid"),
    ('{"op": "cancel", "clordid": ""}', "clordid"),
    ('{"op": "logon", "id": {"a": 1}}', "id"),
    ('{"op": "logon", "version": "4.3"}', "version must be one of 4.4, 4.2, 5.0SP2"),
    ('{"op": "logon", "version": 4.2}', "version must be"),
])
def test_malformed_commands_are_refused_with_a_reason(frame: str, needle: str) -> None:
    with pytest.raises(CommandError, match=needle):
        parse_command(frame, MAX)


def test_oversize_frame_is_refused_before_parsing() -> None:
    frame = json.dumps({"op": "logon", "id": "x" * 5000})
    with pytest.raises(CommandError, match="bytes; the limit is 2048"):
        parse_command(frame, MAX)


def test_bytes_frames_are_accepted_when_json() -> None:
    assert parse_command(b'{"op": "talk"}', MAX).op == "talk"
    with pytest.raises(CommandError):
        parse_command(b"\xff\xfe", MAX)


ORDER = {"op": "order", "symbol": "A", "side": "buy", "price": "1", "qty": 1}


def test_issue_14_commands() -> None:
    assert cmd(ORDER).tif == 0  # Day by default
    for tif, value in (("day", 0), ("GTC", 1), ("ioc", 3), ("fok", 4), ("3", 3), (4, 4)):
        assert cmd({**ORDER, "tif": tif}).tif == value
    assert cmd({"op": "status", "clordid": "abc-1"}) == Command("status", clordid="abc-1")
    assert cmd({"op": "mass_cancel"}) == Command("mass_cancel")
    assert cmd({"op": "mass_cancel", "symbol": "ACORN.LAB"}).symbol == "ACORN.LAB"
    assert cmd({"op": "mass_cancel", "symbol": ""}).symbol == ""
    assert cmd({"op": "md_subscribe", "symbol": "ACORN.LAB"}) == Command("md_subscribe", symbol="ACORN.LAB",
                                                                         value="0")
    assert cmd({"op": "md_subscribe", "symbol": "ACORN.LAB", "depth": 5}).value == "5"
    assert cmd({"op": "md_unsubscribe", "symbol": "ACORN.LAB"}).symbol == "ACORN.LAB"
    modes = (("off", "0"), ("cancel_resting", "1"), ("cancel_aggressor", "2"), ("cancel_both", "3"))
    for mode, value in modes:
        assert cmd({"op": "stp", "mode": mode}) == Command("stp", value=value)


def test_issue_31_order_types_and_times_in_force() -> None:
    bare = {k: v for k, v in ORDER.items() if k != "price"}
    assert (cmd(ORDER).ord_type, cmd(ORDER).stop_px) == (2, "")  # a limit order unless said
    m = cmd({**bare, "ord_type": "market", "tif": "opg"})
    assert (m.ord_type, m.price, m.stop_px, m.tif) == (1, "", "", 2)
    st = cmd({**bare, "ord_type": "stop", "stop_px": "98.5"})
    assert (st.ord_type, st.price, st.stop_px) == (3, "", "98.5")
    sl = cmd({**ORDER, "ord_type": "stop_limit", "stop_px": "1.5", "tif": "atc"})
    assert (sl.ord_type, sl.price, sl.stop_px, sl.tif) == (4, "1", "1.5", 7)


@pytest.mark.parametrize(("obj", "needle"), [
    ({k: v for k, v in ORDER.items() if k != "price"}, "a limit order needs a price"),
    ({**ORDER, "ord_type": "market"}, "a market order takes no price"),
    ({**ORDER, "ord_type": "stop", "stop_px": "1"}, "a stop order takes no price"),
    ({**ORDER, "ord_type": "stop_limit"}, "a stop-limit order needs a stop_px"),
    ({**ORDER, "stop_px": "1"}, "a limit order takes no stop_px"),
    ({**ORDER, "ord_type": "stop_limit", "stop_px": "<b>"}, "price must be a positive decimal"),
    ({**ORDER, "ord_type": "iceberg"}, "ord_type must be one of market, limit, stop, stop_limit"),
    ({**ORDER, "ord_type": 1}, "ord_type must be one of"),
])
def test_issue_31_orders_that_do_not_fit_are_refused(obj: dict[str, object], needle: str) -> None:
    with pytest.raises(CommandError, match=needle):
        cmd(obj)


@pytest.mark.parametrize(("obj", "needle"), [
    ({**ORDER, "tif": "gtd"}, "tif must be one of day"),
    ({**ORDER, "tif": 6}, "TimeInForce 0, 1, 2, 3, 4, 7"),
    ({**ORDER, "tif": True}, "tif"),
    ({**ORDER, "tif": None}, "tif"),
    ({"op": "status"}, "status needs clordid"),
    ({"op": "status", "clordid": "a b"}, "clordid"),
    ({"op": "status", "clordid": "x", "symbol": "A"}, "does not take symbol"),
    ({"op": "mass_cancel", "symbol": "<b>"}, "symbol must be an instrument"),
    ({"op": "mass_cancel", "side": "buy"}, "does not take side"),
    ({"op": "md_subscribe"}, "md_subscribe needs symbol"),
    ({"op": "md_subscribe", "symbol": "lower"}, "symbol"),
    ({"op": "md_subscribe", "symbol": "A", "depth": -1}, "depth must be a whole number"),
    ({"op": "md_subscribe", "symbol": "A", "depth": 101}, "depth"),
    ({"op": "md_subscribe", "symbol": "A", "depth": "full"}, "depth"),
    ({"op": "md_unsubscribe", "symbol": 5}, "symbol"),
    ({"op": "stp"}, "stp needs mode"),
    ({"op": "stp", "mode": "cancel everything"}, "mode must be one of off, cancel_resting"),
    ({"op": "stp", "mode": 2}, "mode must be one of"),
])
def test_issue_14_commands_refused_with_a_reason(obj: object, needle: str) -> None:
    with pytest.raises(CommandError, match=needle):
        cmd(obj)
