"""The scenario matcher: expected fields (exact, regex, absent, capture) against decoded messages."""

from __future__ import annotations

from services.client.scenario.match import (
    Absent,
    Capture,
    Exact,
    Regex,
    Template,
    Var,
    closeness,
    decode,
    match,
    mismatches,
    show,
)

ER = (b"8=FIX.4.4\x019=120\x0135=8\x0149=FIXLAB\x0156=CLIENT01\x0134=3\x0111=r1-b\x0137=42\x01"
      b"150=F\x0139=1\x0132=4\x0158=IOC: remainder cancelled\x0110=123\x01")
X = (b"8=FIX.4.4\x019=50\x0135=X\x01268=2\x01279=0\x01269=0\x01270=97.00\x01279=2\x01269=2\x01"
     b"270=98.00\x0110=001\x01")


def exact(tag: int, *parts: str | Var) -> Exact:
    return Exact(tag, Template(tuple(parts)))


def test_decode_keeps_order_and_repeats() -> None:
    fields = decode(X)
    assert fields[2] == (35, "X")
    assert [v for t, v in fields if t == 270] == ["97.00", "98.00"]
    assert decode(b"35=0\x01garbage\x01=x\x01") == ((35, "0"),)


def test_exact_with_variables_and_capture() -> None:
    fields = decode(ER)
    specs = [exact(35, "8"), exact(11, Var("run"), "-b"), Capture(37, "oid")]
    assert match(specs, fields, {"run": "r1"}) == {"oid": "42"}
    assert match(specs, fields, {"run": "r2"}) is None
    assert match([exact(37, Var("oid"))], fields, {"oid": "42"}) == {}


def test_regex_is_a_full_match() -> None:
    fields = decode(ER)
    assert match([Regex(58, "IOC: .*")], fields, {}) == {}
    assert match([Regex(58, "IOC")], fields, {}) is None
    assert match([Regex(150, "[F0]")], fields, {}) == {}


def test_absent_and_missing() -> None:
    fields = decode(ER)
    assert match([Absent(880)], fields, {}) == {}
    assert match([Absent(150)], fields, {}) is None
    assert match([Capture(880, "x")], fields, {}) is None


def test_any_occurrence_of_a_repeated_tag() -> None:
    fields = decode(X)
    assert match([exact(35, "X"), exact(269, "2"), exact(270, "98.00")], fields, {}) == {}
    assert match([exact(270, "99.00")], fields, {}) is None


def test_mismatches_say_why_and_closeness_counts() -> None:
    fields = decode(ER)
    specs = [exact(35, "8"), exact(150, "0"), Regex(58, "FOK.*"), Absent(32), exact(526, "x")]
    assert mismatches(specs, fields, {}) == [
        "150=F, expected 0", "58=IOC: remainder cancelled, expected ~FOK.*", "32 should be absent, is 4",
        "526 missing"]
    assert closeness(specs, fields, {}) == 1


def test_show_leaves_out_framing() -> None:
    assert show(decode(b"8=FIX.4.4\x019=5\x0135=0\x0110=000\x01")) == "35=0"
    assert str(exact(11, Var("run"), "-$")) == "11=$run-$$"
