"""Every bus message type round-trips through the one codec."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgpack
import pytest

from shared import schema
from shared.schema import SchemaError, decode, decode_batch, encode, encode_batch


def _sample(cls: type[schema.Message]) -> schema.Message:
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        t = str(f.type)
        if t == "tuple[LabOrder, ...]":
            values[f.name] = (schema.LabOrder("c1", "ACORN.LAB", 1, "100.00", 5, 2, 3, "1"),)
        elif t == "tuple[int, ...]":
            values[f.name] = (1, 2, 30_000_000_000)
        elif t == "tuple[tuple[Any, ...], ...]":
            values[f.name] = (("o1", "S", 3, ("x", 1)), ())
        elif f.name in ("bids", "asks"):
            values[f.name] = ((10000, 5, 2), (9999, 1, 1))
        elif t == "int":
            values[f.name] = 7
        elif t == "bool":
            values[f.name] = True
        elif t == "bytes":
            values[f.name] = b"8=FIX.4.4\x019=5\x01"
        else:
            values[f.name] = f"{f.name}-<x>"
    return cls(**values)


@pytest.mark.parametrize("cls", schema.message_types(), ids=lambda c: c.__name__)
def test_every_message_round_trips(cls: type[schema.Message]) -> None:
    msg = _sample(cls)
    assert decode(encode(msg)) == msg
    assert decode_batch(encode_batch([msg, msg])) == [msg, msg]


def test_type_codes_are_unique_and_stable() -> None:
    codes = [c.CODE for c in schema.message_types()]
    assert len(codes) == len(set(codes))
    assert schema.NewOrder.CODE == 1 and schema.Accepted.CODE == 20


@pytest.mark.parametrize("payload", [
    b"", b"\xc1", msgpack.packb([999, "x"]), msgpack.packb("hello"), msgpack.packb([1, "too", "few"]),
])
def test_garbage_is_a_schema_error(payload: bytes) -> None:
    with pytest.raises(SchemaError):
        decode(payload)


def test_batch_must_be_an_array() -> None:
    with pytest.raises(SchemaError):
        decode_batch(msgpack.packb({"a": 1}))


def test_lab_start_carries_its_fix_version_and_an_older_one_is_fix44() -> None:
    start = schema.LabStart("lab1", "1.2.3.4", 5, "4.2")
    assert decode(encode(start)) == start
    assert decode(encode(schema.LabStart("lab1", "1.2.3.4", 5))).fix_version == "4.4"  # type: ignore[attr-defined]
    before = msgpack.packb([schema.LabStart.CODE, "lab1", "1.2.3.4", 5])  # encoded before the field came
    assert decode(before) == schema.LabStart("lab1", "1.2.3.4", 5, "4.4")


def test_issue31_fields_come_last_with_defaults_so_old_entries_load() -> None:
    order = schema.NewOrder("S", "c1", "ACORN.LAB", 1, 0, 5, 0, "gw", 3, 9, 0, schema.ORD_MARKET, 0)
    assert decode(encode(order)) == order
    before = msgpack.packb([schema.NewOrder.CODE, "S", "c1", "ACORN.LAB", 1, 100, 5, 0, "gw", 3, 9, 0])
    old = decode(before)
    assert isinstance(old, schema.NewOrder)
    assert (old.ord_type, old.stop_px) == (schema.ORD_LIMIT, 0)
    assert schema.as_wire(old) == (1, "S", "c1", "ACORN.LAB", 1, 100, 5, 0, "gw", 3, 9, 0)  # no defaults
    assert schema.from_wire(schema.as_wire(order)) == order
    accepted = decode(
        msgpack.packb([schema.Accepted.CODE, "S", "c1", "1", "ACORN.LAB", 1, 100, 5, 0, "E", 9])
    )
    assert isinstance(accepted, schema.Accepted) and (accepted.ord_type, accepted.stop_px) == (2, 0)
    snap = decode(msgpack.packb([schema.MatcherSnapshot.CODE, "0", "1-0", 1, 1, 1, [], [], 5, 0]))
    assert isinstance(snap, schema.MatcherSnapshot) and snap.phases == snap.stops == snap.last_prices == ()


def test_issue31_constants_are_fix_values() -> None:
    assert (schema.ORD_MARKET, schema.ORD_LIMIT, schema.ORD_STOP, schema.ORD_STOP_LIMIT) == (1, 2, 3, 4)
    assert (schema.AT_OPEN, schema.AT_CLOSE) == (2, 7)
    assert schema.PHASES == (0, 1, 2, 3, 4) and schema.PHASE_CONTINUOUS == 2
