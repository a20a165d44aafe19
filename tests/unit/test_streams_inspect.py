"""The inspector's pure views: stream entries decoded to JSON-ready dicts."""

from __future__ import annotations

import json

import pytest

from shared import streams
from shared.schema import (
    Depth,
    LabOrder,
    LabState,
    NewOrder,
    WireRecord,
    encode_batch,
    message_types,
)
from shared.streams import inspect

WIRE = b"8=FIX.4.4\x019=5\x0135=0\x0110=123\x01"


def _example(cls: type) -> object:
    """One instance of each message type, with values of the right kind."""
    values: list[object] = []
    for name, hint in cls.__annotations__.items():
        if name in ("CODE", "_FIELDS"):
            continue
        kind = str(hint)
        if "bytes" in kind:
            values.append(WIRE)
        elif "bool" in kind:
            values.append(True)
        elif "LabOrder" in kind:
            values.append((LabOrder("c1", "ACORN.LAB", 1, "100.00", 5, 0, 5, "0"),))
        elif "tuple" in kind:
            values.append(((10000, 5, 1),))
        elif "int" in kind:
            values.append(7)
        else:
            values.append("x")
    return cls(*values)


@pytest.mark.parametrize("cls", message_types(), ids=lambda c: c.__name__)
def test_every_message_type_becomes_json(cls: type) -> None:
    msg = _example(cls)
    view = inspect.entry_view(b"1-0", {streams.BATCH_FIELD: encode_batch([msg])})  # type: ignore[list-item]
    assert view["id"] == "1-0"
    (decoded,) = view["messages"]
    assert decoded["type"] == cls.__name__
    json.dumps(view)  # JSON-ready: no bytes, no tuples of objects left


def test_fix_wire_bytes_show_soh_as_bar() -> None:
    rec = WireRecord("lab1", 1, "client", WIRE + b"\xff", False, 5)
    view = inspect.entry_view("2-0", {streams.BATCH_FIELD: encode_batch([rec])})
    assert view["messages"][0]["raw"] == "8=FIX.4.4|9=5|35=0|10=123|\\xff"


def test_nested_orders_and_depth_levels_are_plain_lists() -> None:
    state = _example(LabState)
    depth = Depth("ACORN.LAB", ((10000, 5, 1), (9999, 2, 2)), (), 1)
    view = inspect.entry_view("3-0", {streams.BATCH_FIELD: encode_batch([state, depth])})  # type: ignore[list-item]
    assert view["messages"][0]["orders"][0]["clordid"] == "c1"
    assert json.loads(json.dumps(view))["messages"][1]["bids"] == [[10000, 5, 1], [9999, 2, 2]]


def test_a_batch_of_several_messages_keeps_their_order() -> None:
    msgs = [NewOrder("S", f"c{i}", "ACORN.LAB", 1, 100, 1, 0, "g", i, 0) for i in range(3)]
    view = inspect.entry_view("4-0", {streams.BATCH_FIELD: encode_batch(msgs)})
    assert [m["clordid"] for m in view["messages"]] == ["c0", "c1", "c2"]


@pytest.mark.parametrize("payload", [b"\xc1", b"\x93\x01\x02", b"\x91\x91\xcc\xff", b""])
def test_an_undecodable_batch_is_shown_with_its_reason_and_bytes(payload: bytes) -> None:
    view = inspect.entry_view("5-0", {streams.BATCH_FIELD: payload})
    assert "messages" not in view
    assert view["error"]
    assert view["raw"] == inspect.readable(payload)


def test_entries_that_are_not_batches_show_their_fields_as_text() -> None:
    # The dead-letter stream: fields written by shared.bus, one of them binary.
    fields = {b"stream": b"fixlab:{shard-0}:orders", b"reason": b"bad", b"payload": b"\x00\x01ok"}
    view = inspect.entry_view("6-0", fields)
    assert view["fields"] == {"stream": "fixlab:{shard-0}:orders", "reason": "bad", "payload": "\x00|ok"}


def test_a_deleted_entry_says_so() -> None:
    assert inspect.entry_view("7-0", None) == {"id": "7-0", "error": "entry was deleted or trimmed"}
