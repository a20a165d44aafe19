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
