"""The FIX codec with byte literals: fields, encoding, and whole messages out of a byte stream whatever
the reads' boundaries (the tap's and the publisher's framing)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.fix.codec import (
    Frame,
    MalformedMessage,
    checksum,
    encode,
    field,
    field_values,
    framing_problems,
    pairs,
    split_fields,
    split_frames,
    split_pairs,
)

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
    assert (35, "A") in pairs(LOGON.decode("latin-1"))


def test_garbage_frames_say_why() -> None:
    frames, _ = split_frames(b"hello" + b"8=FIX.4.4\x019=abc\x0135=0\x01" + b"8=FIX.4.4\x019=99999\x01",
                             max_message=1000)
    assert [f.error for f in frames] == ["does not start with 8=FIX",
                                         "no 8=<BeginString> followed by 9=<digits>",
                                         "BodyLength 99999 is over 1000"]
    body = b"35=0\x0134=2\x01"
    wrong = b"8=FIX.4.4\x019=%d\x01" % (len(body) + 3) + body + b"10=000\x01"
    assert "10=<3 digits>" in split_frames(wrong + HEARTBEAT)[0][0].error
    assert split_frames(HEARTBEAT)[0][0].error == ""


# ---------------------------------------------------------------------------------------- split

NOS = ("8=FIX.4.4\x019=120\x0135=D\x0134=2\x0149=CLIENT01\x0152=20260101-00:00:00.000\x0156=FIXLAB\x01"
       "11=o1\x0155=ACORN.LAB\x0154=1\x0138=10\x0140=2\x0144=100.25\x0159=0\x0110=123\x01")


def test_split_fields_gives_tags_as_strings() -> None:
    f = split_fields(NOS)
    assert f["35"] == "D" and f["44"] == "100.25" and f["10"] == "123"
    assert list(f)[:3] == ["8", "9", "35"]


def test_split_fields_keeps_the_last_of_a_repeated_tag_and_equals_in_values() -> None:
    assert split_fields("35=D\x0158=a=b\x0158=c\x01") == {"35": "D", "58": "c"}
    assert split_fields("35=D\x0158=\x01") == {"35": "D", "58": ""}


def test_split_pairs_keeps_repeating_groups_in_order() -> None:
    text = "35=W\x01268=2\x01269=0\x01270=1.5\x01269=1\x01270=1.6\x01"
    assert split_pairs(text) == [("35", "W"), ("268", "2"), ("269", "0"), ("270", "1.5"), ("269", "1"),
                                 ("270", "1.6")]
    assert split_pairs("35=D\x01\x0111=a") == [("35", "D"), ("11", "a")]
    with pytest.raises(MalformedMessage, match="not a tag=value field"):
        split_pairs("35=W\x01junk\x01")


def test_split_fields_skips_empty_pieces() -> None:
    assert split_fields("") == {}
    assert split_fields("\x01") == {}
    assert split_fields("35=D\x01\x0111=a") == {"35": "D", "11": "a"}


@pytest.mark.parametrize("text", ["35=D\x01junk\x01", "35=D\x01=x\x01", "35=D\x01a1=x\x01", "x=1", "35"])
def test_split_fields_refuses_what_is_not_tag_value(text: str) -> None:
    with pytest.raises(MalformedMessage, match="not a tag=value field"):
        split_fields(text)
    with pytest.raises(MalformedMessage, match="not a tag=value field"):
        split_pairs(text)


@given(st.lists(st.tuples(st.integers(min_value=1, max_value=99999),
                          st.text(st.characters(blacklist_characters="\x01"), max_size=12)), max_size=30))
def test_split_fields_and_pairs_read_what_was_written(fields: list[tuple[int, str]]) -> None:
    text = "".join(f"{tag}={value}\x01" for tag, value in fields)
    assert split_fields(text) == {str(tag): value for tag, value in fields}
    assert split_pairs(text) == [(str(tag), value) for tag, value in fields]
    assert pairs(text) == fields


def test_pairs_keep_order_repeats_and_malformed_pieces() -> None:
    assert pairs("8=FIX.4.4\x01junk\x01269=0\x01269=1\x01=x\x01") == [
        (8, "FIX.4.4"), (None, "junk"), (269, "0"), (269, "1"), (None, "=x")]
    assert pairs("35=D\x0111=a") == [(35, "D"), (11, "a")]  # cut short: the last piece still counts
    assert pairs("") == [] and pairs("\x01") == [(None, "")]
    assert pairs("\u0663=x\x01") == [(None, "\u0663=x")]  # a non-ASCII digit is no tag


def test_field_values_keep_the_first_value() -> None:
    assert field_values("8=FIX.4.4\x01junk\x0158=a\x0158=b\x01") == {8: "FIX.4.4", 58: "a"}


# ---------------------------------------------------------------------------------------- encode

@given(st.binary(max_size=2000))
def test_checksum_is_the_byte_sum_modulo_256(data: bytes) -> None:
    assert checksum(data) == sum(data) % 256


def test_checksum_of_long_runs_of_high_bytes() -> None:
    for n in (255, 256, 257, 512, 513, 5000):
        assert checksum(b"\xff" * n) == (255 * n) % 256


def test_encode_frames_a_body() -> None:
    body = b"35=0\x0134=2\x0149=LAB001\x0152=20260101-00:00:06.000\x0156=FIXLAB\x01"
    assert encode(body) == HEARTBEAT
    assert encode(body, b"FIX.4.2").startswith(b"8=FIX.4.2\x019=%d\x01" % len(body))
    frames, rest = split_frames(encode(body) + encode(body, b"FIXT.1.1"))
    assert [f.whole for f in frames] == [True, True] and rest == b""
    assert framing_problems(encode(body)) == []


def test_encode_needs_a_body_ending_with_soh() -> None:
    with pytest.raises(MalformedMessage):
        encode(b"35=0\x0134=2")


def test_framing_problems_name_a_wrong_checksum_and_body_length() -> None:
    assert framing_problems(LOGON) == []
    stated = LOGON[-4:-1].decode()
    assert framing_problems(LOGON[:-4] + b"999\x01") == [f"CheckSum is 999, the bytes sum to {stated}"]
    longer = LOGON.replace(b"9=", b"9=1", 1)
    assert any(p.startswith("BodyLength is 1") for p in framing_problems(longer))
    for cut in range(len(LOGON)):
        framing_problems(LOGON[:cut])  # never raises on a fragment
    assert framing_problems(b"") == [] and framing_problems(b"10=\x01") == []


# Long messages (a book snapshot's repeating group) take the split functions' fast path: what it
# gives must be what one piece at a time gives (the references below, the functions' documented
# meaning), for well-formed text and for every way a piece can be wrong.

def _pieces(text: str) -> list[str]:
    parts = text.split("\x01")
    return parts[:-1] if not parts[-1] else parts


def reference_split_pairs(text: str) -> list[tuple[str, str]]:
    out = []
    for piece in _pieces(text):
        if not piece:
            continue
        tag, sep, value = piece.partition("=")
        if not sep or not tag.isdigit():
            raise MalformedMessage(f"not a tag=value field: {piece[:40]!r}")
        out.append((tag, value))
    return out


def reference_pairs(text: str) -> list[tuple[int | None, str]]:
    out: list[tuple[int | None, str]] = []
    for piece in _pieces(text):
        tag, sep, value = piece.partition("=")
        ok = sep and tag.isdigit() and tag.isascii()
        out.append((int(tag), value) if ok else (None, piece))
    return out


def reference_field_values(text: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for tag, value in reference_pairs(text):
        if tag is not None and tag not in out:
            out[tag] = value
    return out


BOOK = "".join(f"269={i % 2}\x01270=1.{i:05d}\x01271={1000 * i}\x01" for i in range(20))
SNAPSHOT = "8=FIX.4.4\x019=999\x0135=W\x01262=r1\x0155=ACORN.LAB\x01268=20\x01" + BOOK + "10=000\x01"

_tag = st.one_of(st.integers(0, 999).map(str), st.sampled_from(["", "a", "1a", "\u0663", "\u00b2", "007"]))
_value = st.one_of(st.integers(0, 10**6).map(str), st.sampled_from(["", "a=b", "=", "\u00e9", "\x02", " "]))
_piece = st.one_of(st.tuples(_tag, _value).map("=".join), _tag, st.just(""))


@given(st.lists(_piece, max_size=60), st.sampled_from(["", "\x01", "\x01\x01"]), st.booleans())
def test_long_messages_split_like_one_piece_at_a_time(pieces: list[str], end: str, book: bool) -> None:
    text = (SNAPSHOT if book else "") + "\x01".join(pieces) + end
    try:
        expected = reference_split_pairs(text)
    except MalformedMessage as exc:
        with pytest.raises(MalformedMessage) as raised:
            split_pairs(text)
        assert str(raised.value) == str(exc)
        with pytest.raises(MalformedMessage) as raised:
            split_fields(text)
        assert str(raised.value) == str(exc)
    else:
        assert split_pairs(text) == expected
        assert list(split_fields(text).items()) == list(dict(expected).items())
    assert pairs(text) == reference_pairs(text)
    assert list(field_values(text).items()) == list(reference_field_values(text).items())


def test_a_long_message_with_odd_pieces_is_read_like_a_short_one() -> None:
    assert len(SNAPSHOT) > 256  # long enough for the fast path
    assert split_pairs(SNAPSHOT)[6:9] == [("269", "0"), ("270", "1.00000"), ("271", "0")]
    assert field_values(SNAPSHOT)[270] == "1.00000"  # the first of 20
    assert list(field_values(SNAPSHOT))[:3] == [8, 9, 35]
    assert split_pairs(SNAPSHOT + "58=a=b\x01")[-1] == ("58", "a=b")
    assert split_pairs(SNAPSHOT + "\x0158=c\x01")[-1] == ("58", "c")
    assert split_pairs(SNAPSHOT + "58=c")[-1] == ("58", "c")
    assert pairs(SNAPSHOT + "58\x01")[-1] == (None, "58")
    assert pairs(SNAPSHOT + "\u0663=x\x01")[-1] == (None, "\u0663=x")
    for bad in ("58", "58\x01", "=x\x01", "a1=x\x01", "58\x0159=1=2\x01"):
        with pytest.raises(MalformedMessage, match="not a tag=value field"):
            split_pairs(SNAPSHOT + bad)
