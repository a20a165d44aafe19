"""The FIX 4.4 data dictionary the quickfix package installs, read once: names, enums, sections.

Pure: no I/O beyond reading the XML file once. Field meanings come from QuickFIX's own
``<sys.prefix>/share/quickfix/FIX44.xml`` so the page names tags exactly as the engines know them.
"""

from __future__ import annotations

import functools
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

MULTI_VALUE_TYPES = frozenset({"MULTIPLEVALUESTRING", "MULTIPLECHARVALUE", "MULTIPLESTRINGVALUE"})


class DictionaryError(RuntimeError):
    """The data dictionary is missing or is not a QuickFIX dictionary."""


@dataclass(frozen=True, slots=True)
class FieldDef:
    tag: int
    name: str
    type: str
    enums: dict[str, str]


@dataclass(frozen=True, slots=True)
class MessageDef:
    msg_type: str
    name: str
    category: str  # "session" (QuickFIX msgcat admin) or "app"


@dataclass(frozen=True, slots=True)
class Dictionary:
    """Fields by tag, messages by MsgType, and which tags belong to the header and trailer."""

    begin_string: str
    fields: dict[int, FieldDef]
    messages: dict[str, MessageDef]
    header_tags: frozenset[int]
    trailer_tags: frozenset[int]

    def field_name(self, tag: int) -> str:
        f = self.fields.get(tag)
        return f.name if f else ""

    def meaning(self, tag: int, value: str) -> str:
        """Explain an enumerated value ("54", "1" -> "Buy"); "" when the field has no enums."""
        if tag == 35:
            m = self.messages.get(value)
            return m.name if m else ""
        f = self.fields.get(tag)
        if f is None or not f.enums:
            return ""
        if value in f.enums:
            return f.enums[value]
        if f.type in MULTI_VALUE_TYPES and " " in value:
            parts = [f.enums.get(v, "?") for v in value.split(" ") if v]
            return ", ".join(parts)
        return ""

    def section(self, tag: int) -> str:
        if tag in self.header_tags:
            return "header"
        if tag in self.trailer_tags:
            return "trailer"
        return "body"


def humanize(description: str) -> str:
    """QuickFIX enum descriptions are upper snake case: "PARTIAL_FILL" -> "Partial fill"."""
    text = description.replace("_", " ").strip().lower()
    return text[:1].upper() + text[1:]


def default_path() -> Path:
    return Path(sys.prefix) / "share" / "quickfix" / "FIX44.xml"


def _names_in(section: ET.Element | None) -> set[str]:
    if section is None:
        return set()
    return {e.attrib["name"] for e in section.iter("field") if "name" in e.attrib}


def parse_dictionary(xml_text: str | bytes) -> Dictionary:
    """Build a Dictionary from the text of a QuickFIX data dictionary."""
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        raise DictionaryError(f"not a QuickFIX data dictionary: {exc}") from None
    if root.tag != "fix" or root.find("fields") is None:
        raise DictionaryError("not a QuickFIX data dictionary: no <fix> root with <fields>")
    begin = f"FIX.{root.attrib.get('major', '?')}.{root.attrib.get('minor', '?')}"
    fields: dict[int, FieldDef] = {}
    by_name: dict[str, int] = {}
    for f in root.find("fields") or ():
        try:
            tag = int(f.attrib["number"])
        except (KeyError, ValueError):
            continue
        enums = {v.attrib["enum"]: humanize(v.attrib.get("description", ""))
                 for v in f.iter("value") if "enum" in v.attrib}
        fields[tag] = FieldDef(tag, f.attrib.get("name", ""), f.attrib.get("type", ""), enums)
        by_name[fields[tag].name] = tag
    messages = {}
    for m in root.iter("message"):
        msg_type = m.attrib.get("msgtype")
        if msg_type is None:
            continue
        category = "session" if m.attrib.get("msgcat") == "admin" else "app"
        messages[msg_type] = MessageDef(msg_type, m.attrib.get("name", ""), category)
    header = {by_name[n] for n in _names_in(root.find("header")) if n in by_name}
    trailer = {by_name[n] for n in _names_in(root.find("trailer")) if n in by_name}
    return Dictionary(begin, fields, messages, frozenset(header), frozenset(trailer))


@functools.cache
def load(path: str | None = None) -> Dictionary:
    """The dictionary at ``path`` (default: the quickfix package's FIX44.xml), parsed once."""
    p = Path(path) if path else default_path()
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise DictionaryError(f"cannot read the FIX data dictionary {p}: {exc.strerror}") from None
    return parse_dictionary(data)
