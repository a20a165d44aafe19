"""The acceptance-definition runner's parsing, message building and comparison, on byte literals."""

from __future__ import annotations

import pytest

from tools.conformance import build, compare, parse_definition, session_level, substitute

DEF = (b"# a comment\n\niCONNECT\nI8=FIX.4.4\x0135=A\x0134=1\x0149=TW\x0152=<TIME>\x0156=ISLD\x0198=0\x01"
       b"108=30\x01\nE8=FIX.4.4\x019=61\x0135=A\x0134=1\x0149=ISLD\x0152=00000000-00:00:00.000\x0156=TW\x01"
       b"98=0\x01108=30\x0110=0\x01\ni2,CONNECT\ne2,DISCONNECT\niDISCONNECT\n")


def test_parse_steps_with_connection_numbers() -> None:
    steps = parse_definition(DEF)
    assert [(s.kind, s.conn) for s in steps] == [("connect", 1), ("send", 1), ("expect", 1), ("connect", 2),
                                                 ("expect_disconnect", 2), ("disconnect", 1)]
    assert session_level(steps)


def test_a_definition_expecting_an_application_message_is_not_session_level() -> None:
    assert not session_level(parse_definition(b"E8=FIX.4.4\x0135=D\x0111=x\x01\n"))


def test_unknown_step_is_an_error() -> None:
    with pytest.raises(ValueError, match="line 1"):
        parse_definition(b"XCONNECT\n")


def test_build_computes_length_and_checksum_and_time() -> None:
    raw = build(b"8=FIX.4.4\x0135=0\x0134=2\x0149=TW\x0152=<TIME>\x0156=ISLD\x01")
    assert raw.startswith(b"8=FIX.4.4\x019=")
    head, _, rest = raw.partition(b"\x0135=")
    body = b"35=" + rest[: rest.rindex(b"10=")]
    assert int(head.split(b"9=")[1]) == len(body)
    assert raw.endswith(b"10=%03d\x01" % (sum(raw[: raw.rindex(b"10=")]) % 256))
    assert b"<TIME>" not in raw


def test_build_sends_written_length_and_checksum_as_they_are() -> None:
    raw = build(b"8=FIX.4.4\x019=30\x0135=D\x0134=2\x0110=123\x01")
    assert raw == b"8=FIX.4.4\x019=30\x0135=D\x0134=2\x0110=123\x01"


def test_compare_is_strict_except_on_loose_fields() -> None:
    want = b"8=FIX.4.4\x019=49\x0135=5\x0134=5\x0152=00000000-00:00:00.000\x0110=0\x01"
    good = b"8=FIX.4.4\x019=49\x0135=5\x0134=5\x0152=20260101-00:00:00.000\x0110=77\x01"
    assert compare(want, good) is None
    assert "34=6" in (compare(want, b"8=FIX.4.4\x019=49\x0135=5\x0134=6\x0152=x\x0110=1\x01") or "")
    other = b"8=FIX.4.4\x019=49\x0135=5\x0134=5\x0152=x\x0158=hi\x0110=1\x01"
    assert "got 58" in (compare(want, other) or "")
    assert "extra" in (compare(b"8=FIX.4.4\x0135=0\x01", b"8=FIX.4.4\x0135=0\x01112=1\x01") or "")
    assert "missing" in (compare(want, b"8=FIX.4.4\x019=49\x0135=5\x01") or "")
    # Without 9= and 10= in the expectation, the received ones are not compared.
    assert compare(b"8=FIX.4.4\x0135=0\x01", b"8=FIX.4.4\x019=5\x0135=0\x0110=001\x01") is None


def test_every_time_of_one_message_comes_from_one_clock_reading() -> None:
    # Many <TIME>s in one message: read one by one they would straddle millisecond boundaries.
    msg = substitute(b"52=<TIME>\x01" + b"122=<TIME>\x01" * 2000 + b"60=<TIME+5>\x01")
    fields = [f.split(b"=", 1) for f in msg.split(b"\x01") if f]
    stamps = {v for k, v in fields if k in (b"52", b"122")}
    assert len(stamps) == 1
    [later] = [v for k, v in fields if k == b"60"]
    assert later > next(iter(stamps))
