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
