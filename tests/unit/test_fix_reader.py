"""The chosen-field reader (shared.fix.reader) with messages built here: any field order, repeated tags,
repeating groups, and every kind of malformed input refused with the field named."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.fix.codec import MalformedMessage, encode, split_fields
from shared.fix.reader import DIGIT, INT, PRICE, TEXT, field_reader, fixed_point

ORDER = ((11, TEXT), (54, DIGIT), (38, INT), (44, PRICE), (55, TEXT))
BOOK = ((262, TEXT), (268, INT))
ENTRY = ((269, DIGIT), (270, PRICE), (271, INT))


def msg(*fields: tuple[int, str]) -> bytes:
    body = "".join(f"{tag}={value}\x01" for tag, value in fields)
    return encode(f"35=D\x0149=A\x0156=B\x01{body}".encode(), b"FIX.4.4")


def test_reads_the_chosen_fields_converted() -> None:
    raw = msg((11, "ORD1"), (54, "2"), (38, "100"), (44, "1.5"), (55, "EURUSD"), (59, "0"))
    assert field_reader(ORDER)(raw) == ("ORD1", 2, 100, 150000, "EURUSD")


@given(st.permutations(((11, "ORD1"), (54, "2"), (38, "100"), (44, "1.08245"), (55, "EURUSD"),
                        (59, "0"), (60, "20260101-00:00:00.000"), (110, "7"), (1, "acct"))))
def test_any_field_order_reads_the_same(fields: list[tuple[int, str]]) -> None:
    assert field_reader(ORDER)(msg(*fields)) == ("ORD1", 2, 100, 108245, "EURUSD")


def test_a_tag_that_starts_like_a_chosen_one_is_another_field() -> None:
    raw = msg((110, "9"), (11, "A"), (544, "7"), (54, "1"), (38, "5"), (440, "x"), (44, "2"), (55, "S"))
    assert field_reader(ORDER)(raw) == ("A", 1, 5, 200000, "S")


def test_a_repeated_tag_keeps_its_last_value_like_split_fields() -> None:
    raw = msg((11, "A"), (11, "B"), (54, "1"), (38, "5"), (44, "2"), (55, "S"))
    assert field_reader(ORDER)(raw)[0] == "B" == split_fields(raw.decode())["11"]


@given(st.lists(st.tuples(st.integers(1, 9999), st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                                      max_size=12)), min_size=1, max_size=30))
def test_text_fields_read_what_split_fields_reads(fields: list[tuple[int, str]]) -> None:
    raw = msg(*fields)
    tags = sorted({tag for tag, _ in fields})
    got = field_reader(tuple((tag, TEXT) for tag in tags))(raw)
    split = split_fields(raw.decode())
    assert got == tuple(split[str(tag)] for tag in tags)


@pytest.mark.parametrize(("raw", "why"), [
    (msg((11, "A"), (54, "1"), (38, "5"), (55, "S")), "tag 44: missing"),
    (msg((54, "1"), (38, "5"), (44, "2"), (55, "S")), "tag 11: missing"),
    (msg((11, "A"), (54, "12"), (38, "5"), (44, "2"), (55, "S")), "tag 54: not a single digit: '12'"),
    (msg((11, "A"), (54, "B"), (38, "5"), (44, "2"), (55, "S")), "tag 54: not a single digit"),
    (msg((11, "A"), (54, "1"), (38, "5x"), (44, "2"), (55, "S")), "tag 38: not a whole number"),
    (msg((11, "A"), (54, "1"), (38, "5"), (44, "1.234567"), (55, "S")), "tag 44: not a price"),
    (msg((11, "A"), (54, "1"), (38, "5"), (44, "-1"), (55, "S")), "tag 44: not a price"),
    (msg((11, "A"), (54, "1"), (38, "5"), (44, ".5"), (55, "S")), "tag 44: not a price"),
    (msg((11, "A"), (54, "1"), (38, "5"), (44, "1e5"), (55, "S")), "tag 44: not a price"),
])
def test_a_missing_or_unconvertible_field_is_named(raw: bytes, why: str) -> None:
    with pytest.raises(MalformedMessage, match=why):
        field_reader(ORDER)(raw)


GOOD = b"35=D\x0111=A\x0154=1\x0138=5\x0144=2\x0155=S\x01"


@pytest.mark.parametrize(("raw", "why"), [
    (GOOD.replace(b"38=5", b"38"), "not a tag=value field: '38'"),
    (GOOD.replace(b"38=5", b"3x=5"), "not a tag=value field: '3x=5'"),
    (GOOD.replace(b"38=5", b"=5"), "not a tag=value field: '=5'"),
    (GOOD.replace(b"\x0138", b"\x01\x0138"), "not a tag=value field: ''"),
    (GOOD[:-1], "the last field does not end with SOH"),
    (GOOD.replace(b"55=S", b"55=\xc3\xa9"), "ASCII"),  # UTF-8, not ASCII
    (GOOD.replace(b"55=S", b"55=\xe9"), "ASCII"),  # not even UTF-8
])
def test_a_message_that_is_not_tag_value_fields_is_refused(raw: bytes, why: str) -> None:
    assert field_reader(ORDER)(GOOD) == ("A", 1, 5, 200000, "S")
    with pytest.raises(MalformedMessage, match=why):
        field_reader(ORDER)(raw)


def test_a_value_may_hold_an_equals_sign() -> None:
    assert field_reader(ORDER)(GOOD.replace(b"11=A", b"11=A=B"))[0] == "A=B"


def book(*entries: tuple[str, str, str], count: int | None = None) -> bytes:
    fields = [(262, "REQ1"), (268, str(len(entries) if count is None else count))]
    for kind, px, size in entries:
        fields += [(269, kind), (270, px), (271, size)]
    return msg(*fields, (9001, "7"))


def test_a_repeating_group_comes_back_entry_by_entry() -> None:
    read = field_reader(BOOK, (268, ENTRY))
    raw = book(("0", "1.08241", "1000000"), ("1", "1.5", "200"), ("0", "3", "1"))
    assert read(raw) == ("REQ1", 3, ((0, 108241, 1000000), (1, 150000, 200), (0, 300000, 1)))
    assert read(book()) == ("REQ1", 0, ())


@pytest.mark.parametrize(("raw", "why"), [
    (book(("0", "1.0", "1"), ("1", "2.0", "2"), count=3),
     "tag 268: 3 entries, but 2 follow it as 269/270/271"),
    (book(("0", "1.0", "1"), ("1", "2.0", "2"), count=1), "tag 268: 1 entries, but 2 follow"),
    (book(("0", "1.0", "1"), ("1", "2.0000001", "2")), "tag 268: 2 entries, but 1 follow"),
    (book(("0", "1.0", "1"), ("1", "-2", "2")), "tag 268: 2 entries, but 1 follow"),
    (book(("0", "1.0", "1"), ("12", "2", "2")), "tag 269 of entry 2: not a single digit: '12'"),
    (book(("0", "1.0", "1"), ("1", "2", "x")), "tag 271 of entry 2: not a whole number: 'x'"),
    # the entry's fields out of order
    (msg((262, "R"), (268, "1"), (270, "1.0"), (269, "0"), (271, "1")), "tag 268: 1 entries, but 0 follow"),
])
def test_a_group_that_does_not_add_up_is_refused(raw: bytes, why: str) -> None:
    with pytest.raises(MalformedMessage, match=why):
        field_reader(BOOK, (268, ENTRY))(raw)


def test_fixed_point_is_exact() -> None:
    assert fixed_point("1.08245") == 108245 and fixed_point("12.") == 1200000 and fixed_point("0") == 0
    assert fixed_point("1.5", scale=2) == 150
    for bad in ("1.082451", "-1.0", "1e5", "", ".", ".5", "1.2.3", "abc", " 1"):
        with pytest.raises(ValueError):
            fixed_point(bad)


def test_a_reader_is_asked_for_sensible_fields() -> None:
    with pytest.raises(ValueError):
        field_reader(((11, TEXT), (11, INT)))
    with pytest.raises(ValueError):
        field_reader(((11, "x"),))
    with pytest.raises(ValueError):
        field_reader(BOOK, (267, ENTRY))
    with pytest.raises(ValueError):
        field_reader(((268, INT), (270, TEXT)), (268, ENTRY))
