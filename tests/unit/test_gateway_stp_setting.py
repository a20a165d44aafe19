"""A session's self-trade prevention changed at run time (the lab page): a setting record on the
intake pipe, applied in order by the publisher, and the same change on the engine thread's Inbound."""

from __future__ import annotations

import os
from collections.abc import Iterator
from decimal import Decimal

import msgpack
import pytest

from services.gateway.config import gateway_settings
from services.gateway.inbound import Inbound
from services.gateway.publisher import IntakeLoop
from services.gateway.records import command_record, fix_record
from shared.config import Instrument
from shared.fix.codec import split_fields
from shared.schema import (
    STP_CANCEL_AGGRESSOR,
    STP_CANCEL_BOTH,
    STP_OFF,
    NewOrder,
    Refused,
    StpSetting,
    decode_wire_batch,
    encode_wire_batch,
    from_wire,
)

ACORN = Instrument("ACORN.LAB", 10_000, Decimal("0.01"))


def fix(body: str) -> bytes:
    raw = body.encode()
    total = b"8=FIX.4.4\x019=%d\x01" % len(raw) + raw
    return total + b"10=%03d\x01" % (sum(total) % 256)


def nos(session: str, clordid: str) -> bytes:
    return fix(f"35=D\x0149={session}\x0156=FIXLAB\x0134=2\x0111={clordid}\x0155=ACORN.LAB\x0154=1"
               "\x0138=1\x0140=2\x0144=100.00\x01")


@pytest.fixture
def loop() -> Iterator[IntakeLoop]:
    settings = gateway_settings({"REDIS_URL": "redis://127.0.0.1:1/0"})
    r, w = os.pipe()
    yield IntakeLoop(settings, "run1", 1, -1, w)
    os.close(r)
    os.close(w)


def test_a_setting_applies_to_the_orders_after_it_and_is_never_published(loop: IntakeLoop) -> None:
    stream = (fix_record(nos("LAB01", "a")) + command_record(StpSetting("LAB01", STP_CANCEL_AGGRESSOR, 1))
              + fix_record(nos("LAB01", "b")) + fix_record(nos("LAB02", "c")))
    assert loop.take_records(stream) == b""
    grouped, count = loop.publisher.group([rec for _n, rec in loop.backlog if rec is not None])
    assert count == 3  # the three orders; the setting is not a command
    published = [m for entries in grouped.values() for m in entries]
    assert [(m[2], m[-1]) for m in published] == [("a", STP_OFF), ("b", STP_CANCEL_AGGRESSOR), ("c", STP_OFF)]
    assert all(m[0] == NewOrder.CODE for m in published)
    # what goes on the bus decodes as orders only
    assert all(m[0] == NewOrder.CODE for m in decode_wire_batch(msgpack.packb(published)))


def test_the_engine_threads_inbound_changes_by_a_new_mapping() -> None:
    configured = {"CLIENT01": STP_CANCEL_BOTH}
    inbound = Inbound([ACORN], "gw1", "x", configured)
    before = inbound.stp
    inbound.set_stp("LAB03", STP_CANCEL_AGGRESSOR)
    assert before == {"CLIENT01": STP_CANCEL_BOTH}  # never mutated: another thread may hold it
    assert configured == {"CLIENT01": STP_CANCEL_BOTH}
    order = inbound.command("D", split_fields(nos("LAB03", "z").decode()), 5)
    assert isinstance(order, NewOrder) and order.stp == STP_CANCEL_AGGRESSOR
    inbound.set_stp("LAB03", STP_OFF)
    order = inbound.command("D", split_fields(nos("LAB03", "y").decode()), 6)
    assert isinstance(order, NewOrder) and order.stp == STP_OFF


def test_bytes_that_are_not_utf8_are_refused_and_the_orders_after_them_still_go(loop: IntakeLoop) -> None:
    """A fuzzed ClOrdID of raw bytes (0xff 0xfe): no command can carry it onto the bus. It once made
    every retry of its batch fail, stalling the intake for every client behind it."""
    body = (b"35=D\x0149=CLIENT02\x0156=FIXLAB\x0134=2\x0111=\xff\xfe\x0155=ACORN.LAB\x0154=1\x0138=1"
            b"\x0140=2\x0144=100.00\x01")
    head = b"8=FIX.4.4\x019=%d\x01" % len(body) + body
    bad = head + b"10=%03d\x01" % (sum(head) % 256)
    stream = fix_record(nos("CLIENT01", "a")) + fix_record(bad) + fix_record(nos("CLIENT01", "b"))
    assert loop.take_records(stream) == b""
    grouped, count = loop.publisher.group([rec for _n, rec in loop.backlog if rec is not None])
    assert count == 2 and loop.publisher.refused == 1  # the two orders; the refusal is an event
    published = [m for entries in grouped.values() for m in entries]
    decoded = [from_wire(m) for m in decode_wire_batch(encode_wire_batch(published))]  # nothing unpackable
    assert [m.clordid for m in decoded if isinstance(m, NewOrder)] == ["a", "b"]
    (refused,) = [m for m in decoded if not isinstance(m, NewOrder)]
    assert isinstance(refused, Refused) and refused.session == "CLIENT02"
    assert "tag 11 is not UTF-8" in refused.body
    assert split_fields(refused.body)["11"] == "\ufffd\ufffd" and split_fields(refused.body)["39"] == "8"
