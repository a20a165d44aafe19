"""The wire parser, with byte literals (the dictionary it names tags with: test_fix_dictionary)."""

from __future__ import annotations

import pytest

from shared.fix import dictionary
from shared.fix.wire import Node, WireGroup, parse, readable

D = dictionary.load()


def fix(body: str) -> bytes:
    """A well-formed message: BodyLength and CheckSum computed."""
    b = body.replace("|", "\x01").encode()
    head = b"8=FIX.4.4\x019=" + str(len(b)).encode() + b"\x01"
    return head + b + b"10=%03d\x01" % (sum(head + b) % 256)


LOGON = fix("35=A|34=1|49=LAB001|52=20260101-12:00:00.000|56=FIXLAB|98=0|108=6|141=Y|")
FILL = fix("35=8|34=7|49=FIXLAB|52=20260101-12:00:01.000|56=LAB001|6=100.5|11=c-1|14=10|17=E9|31=100.5|"
           "32=10|37=O1|39=2|54=1|55=ACORN.LAB|150=F|151=0|")


def test_logon_every_tag_named_by_section() -> None:
    p = parse(LOGON, D)
    assert p.problems == []
    assert (p.msg_type, p.msg_name, p.category, p.seq) == ("A", "Logon", "session", 1)
    named = {f.tag: (f.name, f.section) for f in p.fields}
    assert named[8] == ("BeginString", "header")
    assert named[108] == ("HeartBtInt", "body")
    assert named[10] == ("CheckSum", "trailer")
    assert [f.meaning for f in p.fields if f.tag == 141] == ["Yes"]


def test_execution_report_fill_explained() -> None:
    p = parse(FILL, D)
    assert p.problems == []
    assert p.category == "app" and p.msg_name == "ExecutionReport"
    assert p.get(150) == "F"
    assert ("ExecType", "F", "Trade") in [(f.name, f.value, f.meaning) for f in p.fields]
    assert ("Side", "1", "Buy") in [(f.name, f.value, f.meaning) for f in p.fields]


def test_unknown_tag_is_kept_and_reported() -> None:
    p = parse(fix("35=0|34=2|49=A|52=x|56=B|9999=hello|"), D)
    f = next(f for f in p.fields if f.tag == 9999)
    assert (f.name, f.value, f.section) == ("", "hello", "body")
    assert any("9999" in x for x in p.problems)


def test_fragment_cut_mid_field() -> None:
    p = parse(LOGON[:30], D)
    assert p.fields[0].name == "BeginString"
    assert any("cut short" in x for x in p.problems)
    assert any("CheckSum" in x for x in p.problems)


@pytest.mark.parametrize("raw", [b"", b"\x01", b"garbage", b"=\x01=\x01", b"abc=1\x01", b"\xff\xfe=\x00\x01",
                                 b"8=FIX.4.4\x0135=\x01", b"35=D" * 1000])
def test_malformed_input_never_raises(raw: bytes) -> None:
    p = parse(raw, D)
    assert isinstance(p.fields, list)
    if raw:
        assert p.problems


def test_bad_checksum_and_body_length_are_reported() -> None:
    bad = LOGON[:-4] + b"999\x01"
    assert any("CheckSum is 999" in x for x in parse(bad, D).problems)
    wrong_len = LOGON.replace(b"9=", b"9=1", 1)
    p = parse(wrong_len, D)
    assert any("BodyLength" in x for x in p.problems)


def test_field_without_equals_is_kept_as_text() -> None:
    p = parse(b"8=FIX.4.4\x01junk\x0110=000\x01", D)
    assert any(f.tag is None and f.value == "junk" for f in p.fields)


def test_markup_in_values_stays_text() -> None:
    p = parse(fix("35=D|34=2|49=<img src=x onerror=alert(1)>|52=x|56=FIXLAB|11=<b>x</b>|"), D)
    assert p.get(49) == "<img src=x onerror=alert(1)>"
    assert readable(b"8=FIX.4.4\x0135=0\x01") == "8=FIX.4.4|35=0|"


def _shape(nodes: list[Node]) -> list[object]:
    """A tree as tags: a field is its tag, a group (count tag, [[entry tags], ...])."""
    return [(n.count.tag, [_shape(e) for e in n.entries]) if isinstance(n, WireGroup) else n.tag
            for n in nodes]


def test_market_data_groups_are_nested_entries() -> None:
    req = parse(fix("35=V|34=2|49=LAB001|52=20260101-12:00:00.000|56=FIXLAB|262=r1|263=1|264=0|265=1|"
                    "267=3|269=0|269=1|269=2|146=1|55=ACORN.LAB|"), D)
    assert req.problems == []
    assert _shape(req.tree) == [8, 9, 35, 34, 49, 52, 56, 262, 263, 264, 265,
                                (267, [[269], [269], [269]]), (146, [[55]]), 10]
    assert [f.tag for f in req.fields][-4:] == [269, 146, 55, 10]  # the flat list stays as on the wire
    snap = parse(fix("35=W|34=3|49=FIXLAB|52=20260101-12:00:00.000|56=LAB001|262=r1|55=ACORN.LAB|268=2|"
                     "269=0|270=99.50|271=10|346=2|269=1|270=100.50|271=4|346=1|"), D)
    assert snap.problems == []
    assert _shape(snap.tree)[7:10] == [262, 55, (268, [[269, 270, 271, 346], [269, 270, 271, 346]])]
    inc = parse(fix("35=X|34=4|49=FIXLAB|52=20260101-12:00:00.000|56=LAB001|262=r1|268=2|"
                    "279=1|269=0|55=ACORN.LAB|270=99.50|271=7|346=1|279=2|269=1|55=ACORN.LAB|270=100.50|"), D)
    assert inc.problems == []
    group = inc.tree[8]
    assert _shape([group]) == [(268, [[279, 269, 55, 270, 271, 346], [279, 269, 55, 270]])]


def test_a_group_count_that_does_not_match_its_entries_is_a_problem() -> None:
    short = parse(fix("35=V|34=2|49=LAB001|52=20260101-12:00:00.000|56=FIXLAB|262=r1|263=1|264=0|"
                      "267=3|269=0|269=1|146=1|55=ACORN.LAB|"), D)
    assert short.problems == ["NoMDEntryTypes(267)=3 but 2 entries follow"]
    assert _shape(short.tree)[10] == (267, [[269], [269]])
    extra = parse(fix("35=V|34=2|49=LAB001|52=20260101-12:00:00.000|56=FIXLAB|262=r1|263=1|264=0|"
                      "267=1|269=0|269=1|146=1|55=ACORN.LAB|"), D)
    # the second 269 is past the count: it stands outside the group, where a reader sees it
    assert _shape(extra.tree)[10:12] == [(267, [[269]]), 269]
    bad = parse(fix("35=V|34=2|49=LAB001|52=20260101-12:00:00.000|56=FIXLAB|262=r1|263=1|264=0|"
                    "267=x|269=0|146=1|55=ACORN.LAB|"), D)
    assert bad.problems == ["NoMDEntryTypes(267)=x is not a number of entries"]
