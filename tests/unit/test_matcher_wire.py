"""The wire form the matcher reads and writes: schema.decode_wire_batch / encode_wire_batch / from_wire."""

from __future__ import annotations

import msgpack
import pytest

from shared.schema import (
    CancelOrder,
    NewOrder,
    SchemaError,
    SessionEnded,
    as_wire,
    decode_batch,
    decode_wire_batch,
    encode_batch,
    encode_wire_batch,
    from_wire,
)

CMDS = [NewOrder("A", "c1", "ACORN.LAB", 1, 10000, 5, 0, "gw", 1, 10),
        CancelOrder("A", "c2", "c1", "ACORN.LAB", 1, "gw", 2, 11),
        SessionEnded("A", "gw", 12)]


def test_wire_batches_are_the_codec_batches() -> None:
    wires = [as_wire(c) for c in CMDS]
    # A limit NewOrder's wire form leaves out its trailing defaults (ord_type, stop_px); the rest
    # are the codec's own bytes.
    others = [c for c in CMDS if not isinstance(c, NewOrder)]
    assert encode_wire_batch([as_wire(c) for c in others]) == encode_batch(others)
    assert [from_wire(w) for w in decode_wire_batch(encode_batch(CMDS))] == CMDS
    assert [from_wire(w) for w in decode_wire_batch(encode_wire_batch(wires))] == CMDS
    assert decode_batch(encode_wire_batch(wires)) == CMDS


@pytest.mark.parametrize("payload", [
    b"", b"\xc1", msgpack.packb("hello"), msgpack.packb([[]]), msgpack.packb([["x", 1]]), msgpack.packb([5]),
])
def test_garbage_is_a_schema_error(payload: bytes) -> None:
    with pytest.raises(SchemaError):
        decode_wire_batch(payload)


def test_from_wire_checks_the_shape() -> None:
    with pytest.raises(SchemaError):
        from_wire((1, "too", "few"))
    with pytest.raises(SchemaError):
        from_wire((999,))
