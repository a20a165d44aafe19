"""The tap's framing: whole FIX messages out of a byte stream, whatever the reads' boundaries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from services.gateway.lab.framing import Frame, field, fields, split_frames

SOH = b"\x01"


def fix(body: bytes, begin: bytes = b"FIX.4.4") -> bytes:
    head = b"8=" + begin + SOH + b"9=%d" % len(body) + SOH
    total = head + body
    return total + b"10=%03d" % (sum(total) % 256) + SOH


LOGON = fix(b"35=A\x0134=1\x0149=LAB001\x0152=20260101-00:00:00.000\x0156=FIXLAB"
            b"\x0198=0\x01108=6\x01141=Y\x01")
HEARTBEAT = fix(b"35=0\x0134=2\x0149=LAB001\x0152=20260101-00:00:06.000\x0156=FIXLAB\x01")


def test_two_whole_messages_in_one_read() -> None:
    frames, rest = split_frames(LOGON + HEARTBEAT)
    assert frames == [Frame(LOGON, True), Frame(HEARTBEAT, True)]
    assert rest == b""


def test_partial_message_waits_for_more() -> None:
    for cut in range(1, len(LOGON)):
        frames, rest = split_frames(LOGON[:cut])
        assert frames == [], cut
        assert rest == LOGON[:cut]
        frames, rest = split_frames(rest + LOGON[cut:])
        assert frames == [Frame(LOGON, True)]
        assert rest == b""


@given(st.lists(st.integers(min_value=1, max_value=40), max_size=30))
def test_any_fragmentation_gives_the_same_frames(sizes: list[int]) -> None:
    stream = LOGON + HEARTBEAT + LOGON
    out: list[Frame] = []
    buf = b""
    pos = 0
    for size in [*sizes, len(stream)]:
        buf += stream[pos:pos + size]
        pos += size
        frames, buf = split_frames(buf)
        out.extend(frames)
    assert out == [Frame(LOGON, True), Frame(HEARTBEAT, True), Frame(LOGON, True)]
    assert buf == b""


def test_garbage_before_a_message_is_its_own_frame() -> None:
    frames, rest = split_frames(b"hello world" + LOGON)
    assert frames == [Frame(b"hello world", False), Frame(LOGON, True)]
    assert rest == b""


def test_garbage_keeps_a_tail_that_may_start_a_message() -> None:
    frames, rest = split_frames(b"junk8=F")
    assert frames == [Frame(b"junk", False)]
    assert rest == b"8=F"
    frames, rest = split_frames(rest + LOGON[3:])
    assert frames == [Frame(LOGON, True)]


def test_wrong_body_length_is_garbage_up_to_the_next_message() -> None:
    body = b"35=0\x0134=2\x01"
    wrong = b"8=FIX.4.4\x019=%d\x01" % (len(body) + 3) + body + b"10=000\x01"
    frames, rest = split_frames(wrong + HEARTBEAT)
    assert frames == [Frame(wrong, False), Frame(HEARTBEAT, True)]
    assert rest == b""


def test_bad_checksum_is_still_a_whole_message_forwarded_as_is() -> None:
    # Framing checks only the trailer's shape; the engine judges the checksum value.
    tampered = HEARTBEAT[:-4] + b"999" + SOH
    frames, _ = split_frames(tampered)
    assert frames == [Frame(tampered, True)]


def test_non_numeric_body_length_is_garbage() -> None:
    junk = b"8=FIX.4.4\x019=abc\x0135=0\x01"
    frames, rest = split_frames(junk)
    assert frames == [Frame(junk, False)]
    assert rest == b""


def test_oversized_body_length_is_garbage_so_buffers_stay_bounded() -> None:
    junk = b"8=FIX.4.4\x019=9999999\x0135=0\x01"
    frames, rest = split_frames(junk, max_message=1000)
    assert frames == [Frame(junk, False)]
    assert rest == b""


def test_field_reads_tags_exactly() -> None:
    assert field(LOGON, 35) == "A"
    assert field(LOGON, 34) == "1"
    assert field(LOGON, 8) == "FIX.4.4"
    assert field(LOGON, 108) == "6"
    assert field(LOGON, 8 * 1000) is None
    assert field(LOGON, 41) is None  # "141=Y" must not read as tag 41
    assert (35, "A") in fields(LOGON)
