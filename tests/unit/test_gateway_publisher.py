"""The intake pipe's records: whole FIX messages and framed commands, read back by the publisher;
the publisher's bound (orders past it are refused at once, in order) and its restart skip."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from services.gateway.config import gateway_settings
from services.gateway.handoff import control_record
from services.gateway.publisher import IntakeLoop
from shared.schema import SessionEnded
from shared.schema import as_wire as to_wire


def fix(body: str) -> bytes:
    """A whole FIX 4.4 message around ``body`` (tags from 35 on), as QuickFIX's toString writes it."""
    raw = body.encode("utf-8", "surrogateescape")
    head = b"8=FIX.4.4\x019=%d\x01" % len(raw)
    total = head + raw
    return total + b"10=%03d\x01" % (sum(total) % 256)


def nos(clordid: str) -> bytes:
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


def replies(fd: int) -> list[list[object]]:
    try:
        data = os.read(fd, 1 << 20)
    except BlockingIOError:
        return []
    return [json.loads(line) for line in data.splitlines()]


def test_messages_and_commands_come_back_whole_in_order_across_reads(loop: tuple[IntakeLoop, int]) -> None:
    intake, _ = loop
    ended = SessionEnded("CLIENT01", "gw1", 42)
    stream = nos("a") + control_record(ended) + nos("b")
    rest = b""
    for i in range(0, len(stream), 7):  # the pipe may cut records anywhere
        rest = intake.take_records(rest + stream[i:i + 7])
    assert rest == b""
    records = [rec for _n, rec in intake.backlog]
    assert [n for n, _rec in intake.backlog] == [1, 2, 3]
    assert records[0] is not None and records[0][0] == nos("a").decode()
    assert records[1] == to_wire(ended)
    assert records[2] is not None and "\x0111=b\x01" in records[2][0]


def test_bytes_that_are_not_utf8_survive_the_pipe(loop: tuple[IntakeLoop, int]) -> None:
    intake, _ = loop
    # SWIG hands QuickFIX's bytes to Python with surrogateescape; BodyLength counts the bytes.
    text = nos("x").decode("utf-8", "surrogateescape").replace("CLIENT01", "CL\udcffENT1")
    raw = fix(text[text.index("35="):text.rindex("10=")])
    assert intake.take_records(raw) == b""
    record = intake.backlog[0][1]
    assert record is not None and record[0].encode("utf-8", "surrogateescape") == raw


def test_garbage_on_the_pipe_is_counted_and_skipped(loop: tuple[IntakeLoop, int]) -> None:
    intake, _ = loop
    intake.take_records(b"not fix at all" + nos("ok"))
    assert intake.errors == 1
    assert [rec is None for _n, rec in intake.backlog] == [True, False]


def test_orders_past_the_bound_are_refused_in_order_and_a_session_end_never_is(
        loop: tuple[IntakeLoop, int]) -> None:
    intake, out = loop
    orders = b"".join(nos(f"o{i}") for i in range(12))
    intake.take_records(orders + control_record(SessionEnded("S", "gw1", 1)))
    assert intake.waiting == 11 and intake.busy == 2
    kept = [rec is not None for _n, rec in intake.backlog]
    assert kept == [True] * 10 + [False, False, True]
    refusals = replies(out)
    assert [(r[0], r[1]) for r in refusals] == [("R", "CLIENT01"), ("R", "CLIENT01")]
    assert all("exchange busy" in str(r[2]) and "\x01150=8\x01" in str(r[2]) for r in refusals)
    assert "\x0111=o10\x01" in str(refusals[0][2]) and "\x0111=o11\x01" in str(refusals[1][2])


def test_a_batch_skips_what_an_earlier_publisher_already_published(loop: tuple[IntakeLoop, int]) -> None:
    intake, _ = loop
    intake.take_records(b"".join(nos(f"o{i}") for i in range(5)))
    intake.skip_upto = 3  # learnt from Redis: records 1..3 are on the bus
    assert intake.next_batch()
    assert intake.batch is not None and [n for n, _rec in intake.batch] == [4, 5]
    assert intake.batch_last == 5 and intake.waiting == 2
