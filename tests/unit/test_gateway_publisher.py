"""The intake pipe's records: received FIX messages and the gateway's own commands, read back by the
publisher; the acceptor's bound (orders past it are refused at once, in order; a command never is)
and the publisher's restart skip."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from services.gateway.config import gateway_settings
from services.gateway.handoff import Handoff
from services.gateway.inbound import Inbound
from services.gateway.publisher import IntakeLoop
from services.gateway.records import RecordError, command_record, fix_record, split_records
from shared.fix.codec import split_fields
from shared.schema import SessionEnded
from shared.schema import as_wire as to_wire


def fix(body: str) -> bytes:
    """A whole FIX 4.4 message around ``body`` (tags from 35 on), as QuickFIX's toString writes it."""
    raw = body.encode("utf-8", "surrogateescape")
    head = b"8=FIX.4.4\x019=%d\x01" % len(raw)
    total = head + raw
    return total + b"10=%03d\x01" % (sum(total) % 256)


def nos(clordid: str) -> bytes:
    return fix_record(raw_nos(clordid))


def raw_nos(clordid: str) -> bytes:
    return fix(f"35=D\x0149=CLIENT01\x0156=FIXLAB\x0134=2\x0111={clordid}\x0155=ACORN.LAB\x0154=1"
               "\x0138=1\x0140=2\x0144=100.00\x01")


@pytest.fixture
def loop() -> Iterator[tuple[IntakeLoop, int]]:
    settings = gateway_settings({"REDIS_URL": "redis://127.0.0.1:1/0", "FIXLAB_GATEWAY_QUEUE": "10"})
    r, w = os.pipe()
    os.set_blocking(r, False)
    yield IntakeLoop(settings, "run1", 1, -1, w), r
    os.close(r)
    os.close(w)


def test_messages_and_commands_come_back_whole_in_order_across_reads(loop: tuple[IntakeLoop, int]) -> None:
    intake, _ = loop
    ended = SessionEnded("CLIENT01", "gw1", 42)
    stream = nos("a") + command_record(ended) + nos("b")
    rest = b""
    for i in range(0, len(stream), 7):  # the pipe may cut records anywhere
        rest = intake.take_records(rest + stream[i:i + 7])
    assert rest == b""
    records = [rec for _n, rec in intake.backlog]
    assert [n for n, _rec in intake.backlog] == [1, 2, 3]
    assert records[0] is not None and records[0][0] == raw_nos("a").decode()
    assert records[1] == to_wire(ended)
    assert records[2] is not None and "\x0111=b\x01" in records[2][0]


def test_bytes_that_are_not_utf8_survive_the_pipe(loop: tuple[IntakeLoop, int]) -> None:
    intake, _ = loop
    # SWIG hands QuickFIX's bytes to Python with surrogateescape; BodyLength counts the bytes.
    text = raw_nos("x").decode("utf-8", "surrogateescape").replace("CLIENT01", "CL\udcffENT1")
    raw = fix(text[text.index("35="):text.rindex("10=")])
    assert intake.take_records(fix_record(raw)) == b""
    record = intake.backlog[0][1]
    assert record is not None and record[0].encode("utf-8", "surrogateescape") == raw


def test_garbage_on_the_pipe_is_counted_and_skipped(loop: tuple[IntakeLoop, int]) -> None:
    intake, _ = loop
    unknown = b"X" + (4).to_bytes(4, "big") + b"junk"
    undecodable = b"C" + (3).to_bytes(4, "big") + b"\xc1\xc1\xc1"
    intake.take_records(unknown + undecodable + nos("ok"))
    assert intake.errors == 2
    assert [rec is None for _n, rec in intake.backlog] == [True, True, False]
    # A length no record can have: the stream cannot be followed, which only a bug can cause.
    with pytest.raises(RecordError):
        split_records(b"F\xff\xff\xff\xff" + raw_nos("x"))


def test_orders_past_the_bound_are_refused_in_order_and_a_session_end_never_is() -> None:
    handoff = Handoff("run1", max_pending=10)  # no publisher yet: records wait, counted against the bound
    sent = [handoff.send(raw_nos(f"o{i}").decode()) for i in range(12)]
    handoff.send_command(SessionEnded("S", "gw1", 1))
    assert sent == [True] * 10 + [False, False]
    assert handoff.waiting == 11
    # The acceptor answers the two it could not take, at once, with a clear text.
    inbound = Inbound(gateway_settings({"REDIS_URL": "redis://127.0.0.1:1/0"}).common.instruments, "gw1")
    for clordid in ("o10", "o11"):
        f = split_fields(raw_nos(clordid).decode())
        body = inbound.busy("D", f, handoff.waiting, 1).body
        assert "exchange busy" in body and "\x01150=8\x01" in body and f"\x0111={clordid}\x01" in body


def test_a_batch_skips_what_an_earlier_publisher_already_published(loop: tuple[IntakeLoop, int]) -> None:
    intake, _ = loop
    intake.take_records(b"".join(nos(f"o{i}") for i in range(5)))
    intake.skip_upto = 3  # learnt from Redis: records 1..3 are on the bus
    assert intake.next_batch()
    assert intake.batch is not None and [n for n, _rec in intake.batch] == [4, 5]
    assert intake.batch_last == 5 and intake.waiting == 2
