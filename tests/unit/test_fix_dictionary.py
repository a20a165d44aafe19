"""The FIX 4.4 dictionary: the exchange's own (the installed FIX44.xml plus TrdMatchID 880 in
ExecutionReport) and the names of tags, enum values, messages and sections."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import quickfix as fix

from shared.fix import dictionary, versions
from shared.fix.dictionary import (
    DictionaryError,
    acceptor_dictionary,
    exchange_dictionary,
    humanize,
    parse_dictionary,
    write_exchange_dictionary,
)

D = dictionary.load()

SMALL = """<fix type='FIX' major='4' minor='4' servicepack='0'>
 <messages>
  <message name='ExecutionReport' msgtype='8' msgcat='app'>
   <field name='OrderID' required='Y' />
   <field name='LastPx' required='N' />
   <field name='LastQty' required='N' />
  </message>
 </messages>
 <fields>
  <field number='880' name='TrdMatchID' type='STRING' />
 </fields>
</fix>
"""


def er_fields(xml: str) -> list[str]:
    root = ET.fromstring(xml)
    (er,) = [m for m in root.iter("message") if m.get("msgtype") == "8"]
    return [str(f.get("name")) for f in er if f.tag == "field"]


def test_one_line_is_added_next_to_last_px() -> None:
    out = exchange_dictionary(SMALL)
    assert out.splitlines()[:5] == SMALL.splitlines()[:5]
    assert out.splitlines()[5] == "   <field name='TrdMatchID' required='N' />"
    assert out.replace("   <field name='TrdMatchID' required='N' />\n", "", 1) == SMALL
    assert er_fields(out) == ["OrderID", "LastPx", "TrdMatchID", "LastQty"]


def test_already_listed_comes_back_unchanged() -> None:
    once = exchange_dictionary(SMALL)
    assert exchange_dictionary(once) == once


def test_double_quotes_and_no_last_px() -> None:
    src = SMALL.replace("'", '"').replace('   <field name="LastPx" required="N" />\n', "")
    out = exchange_dictionary(src)
    assert er_fields(out) == ["OrderID", "LastQty", "TrdMatchID"]


@pytest.mark.parametrize(("xml", "text"), [
    ("", "not a QuickFIX FIX 4.4"),
    (SMALL.replace("minor='4'", "minor='2'"), "not a QuickFIX FIX 4.4"),
    (SMALL.replace("number='880'", "number='881'"), "does not define field 880"),
    (SMALL.replace("ExecutionReport", "Execution"), "no ExecutionReport"),
    (SMALL.replace("  </message>\n", ""), "not closed"),
])
def test_bad_sources_are_refused_with_a_clear_error(xml: str, text: str) -> None:
    with pytest.raises(DictionaryError, match=text):
        exchange_dictionary(xml)


def test_the_installed_dictionary_gains_exactly_880_in_execution_report(tmp_path: Path) -> None:
    source = dictionary.installed_dictionary()
    out = write_exchange_dictionary(tmp_path / "d" / "FIXLAB-FIX44.xml")
    before, after = source.read_text().splitlines(), out.read_text().splitlines()
    assert len(after) == len(before) + 1
    assert "TrdMatchID" in er_fields(out.read_text()) and "TrdMatchID" not in er_fields(source.read_text())
    # QuickFIX validates a Trade ExecutionReport with it, and not with the stock file.
    raw = ("8=FIX.4.4\x019=0\x0135=8\x0149=FIXLAB\x0156=C\x0134=2\x0152=20260101-00:00:00\x0137=1\x01"
           "11=a\x0117=e\x01150=F\x0139=1\x0155=X\x0154=1\x0138=10\x0144=1\x01151=5\x0114=5\x016=1\x01"
           "31=1\x0132=5\x0160=20260101-00:00:00\x01880=M1\x0110=000\x01")
    text = fix.Message(raw, False).toString()
    ours = fix.DataDictionary(str(out))
    ours.validate(fix.Message(text, ours, False))
    stock = fix.DataDictionary(str(source))
    with pytest.raises(fix.TagNotDefinedForMessage):
        stock.validate(fix.Message(text, stock, False))


def test_write_replaces_only_a_different_file(tmp_path: Path) -> None:
    dest = tmp_path / "x.xml"
    dest.write_text("old")
    write_exchange_dictionary(dest)
    first = dest.stat().st_mtime_ns
    write_exchange_dictionary(dest)
    assert dest.stat().st_mtime_ns == first
    assert [p.name for p in tmp_path.iterdir()] == ["x.xml"]  # no temporary file left behind


def test_unreadable_source(tmp_path: Path) -> None:
    with pytest.raises(DictionaryError, match="cannot read"):
        write_exchange_dictionary(tmp_path / "out.xml", tmp_path / "missing.xml")


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert dictionary.main(["--out", str(tmp_path / "FIXLAB-FIX44.xml")]) == 0
    assert "TrdMatchID" in er_fields((tmp_path / "FIXLAB-FIX44.xml").read_text())
    assert dictionary.main(["--out", str(tmp_path / "o.xml"), "--source", str(tmp_path / "no.xml")]) == 2
    assert "cannot read" in capsys.readouterr().err


# ------------------------------------------------------------------------------- names of tags

def test_dictionary_names_fields_messages_and_sections() -> None:
    assert D.begin_string == "FIX.4.4"
    assert D.field_name(54) == "Side"
    assert D.meaning(54, "1") == "Buy"
    assert D.meaning(150, "F") == "Trade"
    assert D.meaning(39, "1") == "Partially filled"
    assert D.meaning(35, "8") == "ExecutionReport"
    assert D.messages["A"].category == "session" and D.messages["D"].category == "app"
    assert {8, 9, 35, 34, 49, 56, 52} <= D.header_tags and 10 in D.trailer_tags
    assert D.section(54) == "body"


def test_enum_descriptions_read_as_words() -> None:
    assert humanize("PARTIAL_FILL") == "Partial fill"
    assert D.meaning(54, "Z") == ""  # not an enum value: no meaning invented
    assert D.meaning(44, "100") == ""  # not an enum field


def test_multi_value_fields_explain_each_value() -> None:
    assert D.meaning(18, "1 2") == "Not held, Work"


def test_not_a_dictionary_is_a_clear_error() -> None:
    with pytest.raises(DictionaryError):
        parse_dictionary(b"<html></html>")
    with pytest.raises(DictionaryError):
        parse_dictionary(b"<fix")
    with pytest.raises(DictionaryError, match="cannot read"):
        dictionary.load("/nonexistent/FIX44.xml")


def test_the_installed_dictionary_is_named_once() -> None:
    # One path for the file the quickfix package installs: the names and the derivation read it.
    assert dictionary.installed_dictionary().name == "FIX44.xml"
    assert dictionary.load(str(dictionary.installed_dictionary())) == D


def test_the_installed_dictionary_is_found_under_the_scheme_data_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Debian's own python3 (the image on a debootstrapped base): sys.prefix is /usr, pip's root installs
    # put data files under /usr/local, sysconfig's "data" path. Found there; sys.prefix is the fallback.
    # Every version's files are looked up the same way (the gateway in compose once looked for
    # FIX42.xml under /usr only and restarted forever).
    data, prefix = tmp_path / "usr-local", tmp_path / "usr"
    (data / "share" / "quickfix").mkdir(parents=True)
    for name in ("FIX44.xml", "FIX42.xml"):
        (data / "share" / "quickfix" / name).write_text("<fix/>")
    monkeypatch.setattr(versions.sysconfig, "get_paths", lambda: {"data": str(data)})
    monkeypatch.setattr(versions.sys, "prefix", str(prefix))
    assert dictionary.installed_dictionary() == data / "share" / "quickfix" / "FIX44.xml"
    assert versions.installed("FIX42.xml") == data / "share" / "quickfix" / "FIX42.xml"
    (data / "share" / "quickfix" / "FIX44.xml").unlink()
    (prefix / "share" / "quickfix").mkdir(parents=True)
    (prefix / "share" / "quickfix" / "FIX44.xml").write_text("<fix/>")
    assert dictionary.installed_dictionary() == prefix / "share" / "quickfix" / "FIX44.xml"


# ------------------------------------------------------------------ the acceptor's trimmed copy

TRIM = """<fix type='FIX' major='4' minor='4' servicepack='0'>
 <header><field name='MsgType' required='Y' /></header>
 <trailer><field name='CheckSum' required='Y' /></trailer>
 <messages>
  <message name='Heartbeat' msgtype='0' msgcat='admin'><field name='TestReqID' required='N' /></message>
  <message name='NewOrderSingle' msgtype='D' msgcat='app'>
   <field name='ClOrdID' required='Y' />
   <component name='Instrument' required='Y' />
  </message>
  <message name='QuoteRequest' msgtype='R' msgcat='app'>
   <field name='QuoteReqID' required='Y' />
   <component name='Parties' required='N' />
  </message>
 </messages>
 <components>
  <component name='Instrument'>
   <field name='Symbol' required='Y' />
   <group name='NoSecurityAltID' required='N'><field name='SecurityAltID' required='N' /></group>
  </component>
  <component name='Parties'><field name='PartyID' required='N' /></component>
 </components>
 <fields>
  <field number='35' name='MsgType' type='STRING'><value enum='0' description='HEARTBEAT' /></field>
  <field number='10' name='CheckSum' type='STRING' />
  <field number='112' name='TestReqID' type='STRING' />
  <field number='11' name='ClOrdID' type='STRING' />
  <field number='55' name='Symbol' type='STRING' />
  <field number='454' name='NoSecurityAltID' type='NUMINGROUP' />
  <field number='455' name='SecurityAltID' type='STRING' />
  <field number='131' name='QuoteReqID' type='STRING' />
  <field number='448' name='PartyID' type='STRING' />
  <field number='54' name='Side' type='CHAR'><value enum='1' description='BUY' /></field>
 </fields>
</fix>
"""


def test_the_acceptor_copy_keeps_only_the_messages_asked_for_and_what_they_use() -> None:
    root = ET.fromstring(acceptor_dictionary(TRIM, ["0", "D"]))
    assert [m.get("msgtype") for m in root.iter("message")] == ["0", "D"]
    assert [c.get("name") for c in root.find("components") or ()] == ["Instrument"]
    fields = root.find("fields")
    assert fields is not None
    assert [f.get("number") for f in fields] == ["35", "10", "112", "11", "55", "454", "455"]
    # The kept messages are whole: the component and its group, required flags as they were.
    (d,) = [m for m in root.iter("message") if m.get("msgtype") == "D"]
    assert ET.tostring(d) == ET.tostring(ET.fromstring(TRIM).find("messages")[1])  # type: ignore[index]
    # Enum values stay (validation checks them); their descriptions go (QuickFIX keeps them as names only).
    (msg_type,) = [f for f in fields if f.get("number") == "35"]
    assert [v.attrib for v in msg_type] == [{"enum": "0"}]


def test_the_acceptor_copy_refuses_a_message_the_dictionary_lacks() -> None:
    with pytest.raises(DictionaryError, match="no message of type AF"):
        acceptor_dictionary(TRIM, ["0", "AF"])
    with pytest.raises(DictionaryError, match="not a QuickFIX data dictionary"):
        acceptor_dictionary("<fix><fields/></fix>", ["0"])


def test_quickfix_validates_a_kept_message_the_same_with_the_acceptor_copy(tmp_path: Path) -> None:
    whole = exchange_dictionary(dictionary.installed_dictionary().read_text(encoding="utf-8"))
    kept = ["0", "1", "2", "3", "4", "5", "A", "D", "F", "G", "8", "9", "j"]
    paths = {}
    for name, text in (("whole", whole), ("trimmed", acceptor_dictionary(whole, kept))):
        paths[name] = tmp_path / f"{name}.xml"
        paths[name].write_text(text)
    header = "8=FIX.4.4\x019=0\x0135=D\x0134=2\x0149=C\x0152=20240102-10:00:00.000\x0156=FIXLAB\x01"
    bodies = {
        "ok": "11=a\x0121=1\x0155=X\x0154=1\x0160=20240102-10:00:00\x0138=1\x0140=2\x0144=1\x01",
        "enum": "11=a\x0121=1\x0155=X\x0154=Z\x0160=20240102-10:00:00\x0138=1\x0140=2\x0144=1\x01",
        "missing": "11=a\x0121=1\x0155=X\x0160=20240102-10:00:00\x0138=1\x0140=2\x0144=1\x01",
        "format": "11=a\x0121=1\x0155=X\x0154=1\x0160=20240102-10:00:00\x0138=x\x0140=2\x0144=1\x01",
    }
    for body in bodies.values():
        outcomes = []
        for path in paths.values():
            dd = fix.DataDictionary(str(path))
            try:
                dd.validate(fix.Message(header + body + "10=000\x01", dd, False))
                outcomes.append("valid")
            except fix.FIXException as exc:
                outcomes.append(type(exc).__name__)
        assert outcomes[0] == outcomes[1]


def test_repeating_groups_by_message_components_expanded() -> None:
    d = dictionary.load()
    entries = d.groups["W"][268]  # NoMDEntries, in the MDFullGrp component
    assert entries.delimiter == 269 and {270, 271, 346} <= entries.fields
    assert d.groups["X"][268].delimiter == 279 and 55 in d.groups["X"][268].fields  # Instrument inside
    assert set(d.groups["V"]) >= {267, 146}
    assert d.groups["V"][146].delimiter == 55
    assert d.groups["D"].get(78) is not None and d.groups["D"][78].delimiter == 79  # NoAllocs
    assert d.groups["0"] == {}
