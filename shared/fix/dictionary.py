"""The FIX 4.4 dictionary: the one the quickfix package installs, the exchange's own, names of tags.

The installed file is ``<data>/share/quickfix/FIX44.xml`` (sysconfig's data path: sys.prefix in a venv);
it is never copied into the repo.

The exchange's own dictionary is that file plus TrdMatchID (880) in ExecutionReport. Stock FIX44.xml
defines field 880 but does not list it in ExecutionReport (35=8), where the exchange sends it to the
sessions that ask (FIX 5.0 added it there). Real exchanges publish their own dictionary for exactly
this; ours is derived at run time from the installed file, one added line, everything else byte for
byte as QuickFIX installed it:

    python -m shared.fix.dictionary --out FIXLAB-FIX44.xml

The acceptor validates with a trimmed copy of it, never published (``acceptor_dictionary``): QuickFIX
gives each of the gateway's hundreds of sessions its own copy of its dictionary, about 2.4 MiB for the
whole of FIX 4.4, and much less for only the messages the exchange speaks (``EXCHANGE_MESSAGES``) and
the fields they use.

Names: ``load()`` reads a dictionary once into field names, enum meanings, messages and sections,
so a page names tags exactly as the engines know them.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import sys
import tempfile
import xml.etree.ElementTree as ET
import zlib
from collections import ChainMap
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

FILE_NAME = "FIXLAB-FIX44.xml"
# The application messages the exchange speaks, received and sent, that the acceptor's dictionary
# keeps (with the session level): orders, their status and mass cancel, the security list and
# market data. What a client sends is kept whole, with the fields, components and groups stock
# FIX 4.4 gives it; what the exchange only sends is kept with the fields it writes (WRITTEN).
RECEIVED_MESSAGES = frozenset({"D", "F", "G", "H", "q", "x", "V", "e", "g"})
SENT_MESSAGES = frozenset({"8", "9", "j", "r", "y", "W", "X", "Y", "f", "h"})
EXCHANGE_MESSAGES = RECEIVED_MESSAGES | SENT_MESSAGES
# The tags the exchange writes in each message it only sends (besides the header and trailer), where
# it writes them: services/gateway/outbound.py, inbound.py (refusals), securities.py, marketdata.py,
# and QuickFIX's own BusinessMessageReject. A tests/unit check holds every body they write to this.
WRITTEN: dict[str, frozenset[int]] = {
    # ExecutionReport: OrderID, ExecID, ClOrdID, OrigClOrdID, ExecType, OrdStatus, Symbol, Side,
    # OrderQty, OrdType, Price, TimeInForce, LastPx, LastQty, LeavesQty, CumQty, AvgPx, TransactTime,
    # SecondaryExecID, TrdMatchID, Text, OrdRejReason, OrdStatusReqID, StopPx.
    "8": frozenset({37, 17, 11, 41, 150, 39, 55, 54, 38, 40, 44, 59, 31, 32, 151, 14, 6, 60, 527, 880, 58,
                    103, 790, 99}),
    "9": frozenset({37, 11, 41, 39, 434, 102, 60, 58}),  # OrderCancelReject
    "j": frozenset({45, 372, 379, 380, 58}),  # BusinessMessageReject (QuickFIX's)
    "r": frozenset({11, 37, 530, 531, 532, 533, 55, 54, 60, 58}),  # OrderMassCancelReport
    "y": frozenset({320, 322, 560, 393, 893, 146, 55, 107, 561, 562, 58}),  # SecurityList
    # Market data: MDReqID, Symbol, NoMDEntries with MDUpdateAction, MDEntryType, MDEntryID,
    # MDEntryRefID, MDEntryPx, MDEntrySize, MDEntryDate, MDEntryTime, NumberOfOrders,
    # MDEntryPositionNo, Text, and for a call's indicative entries TradingSessionSubID and
    # TradeCondition; the reject's MDReqRejReason and Text.
    "W": frozenset({262, 55, 268, 269, 278, 270, 271, 272, 273, 346, 290, 58, 625, 277}),
    "X": frozenset({262, 268, 279, 269, 278, 280, 55, 270, 271, 272, 273, 346, 290, 58, 625, 277}),
    "Y": frozenset({262, 281, 58}),
    # SecurityStatus: SecurityStatusReqID, Symbol, TradingSessionID, TradingSessionSubID,
    # UnsolicitedIndicator, SecurityTradingStatus, TransactTime, Text (services/gateway/status.py).
    "f": frozenset({324, 55, 336, 625, 325, 326, 60, 58}),
    # TradingSessionStatus: TradSesReqID, TradingSessionID, UnsolicitedIndicator, TradSesStatus, Text.
    "h": frozenset({335, 336, 325, 340, 58}),
}
# The repeating groups the exchange reads in what it receives, with the fields it reads in them
# (services/gateway/marketdata.py: MDEntryType in NoMDEntryTypes, Symbol in NoRelatedSym): kept where a
# version's received messages are slimmed (shared.fix.versions, FIX 5.0 SP2).
READ_GROUPS: dict[str, frozenset[int]] = {"V": frozenset({267, 269, 146, 55})}
TRD_MATCH_ID = 880
_V = TypeVar("_V")
MULTI_VALUE_TYPES = frozenset({"MULTIPLEVALUESTRING", "MULTIPLECHARVALUE", "MULTIPLESTRINGVALUE"})

_ROOT = re.compile(r"""<fix\s[^>]*major=(['"])4\1[^>]*minor=(['"])4\2""")
_MESSAGE = re.compile(r"""<message\s+name=(['"])ExecutionReport\1[^>]*>""")
_FIELD_DEF = re.compile(r"""<field\s+number=(['"])880\1\s+name=(['"])TrdMatchID\2""")
_LISTED = re.compile(r"""<field\s+name=(['"])TrdMatchID\1""")
_LAST_PX = re.compile(r"""^([ \t]*)<field\s+name=(['"])LastPx\2[^>]*/>[ \t]*\r?\n""", re.MULTILINE)


class DictionaryError(ValueError):
    """A dictionary file is missing, or is not a QuickFIX FIX dictionary this module understands."""


def installed_dictionary() -> Path:
    """The FIX 4.4 dictionary the quickfix package installs (``shared.fix.versions.installed``)."""
    from shared.fix.versions import installed

    return installed("FIX44.xml")


# ------------------------------------------------------------------------ the exchange's own


def exchange_dictionary(xml: str) -> str:
    """Return ``xml`` (a QuickFIX FIX44.xml) with TrdMatchID listed, optional, in ExecutionReport.

    A dictionary that already lists it comes back unchanged.
    """
    if not _ROOT.search(xml):
        raise DictionaryError("not a QuickFIX FIX 4.4 dictionary (no <fix major='4' minor='4'>)")
    if not _FIELD_DEF.search(xml):
        raise DictionaryError("the dictionary does not define field 880 TrdMatchID")
    head = _MESSAGE.search(xml)
    if head is None:
        raise DictionaryError("the dictionary has no ExecutionReport message")
    end = xml.find("</message>", head.end())
    if end < 0:
        raise DictionaryError("the ExecutionReport message is not closed")
    body = xml[head.end():end]
    if _LISTED.search(body):
        return xml
    anchor = _LAST_PX.search(body)
    if anchor is not None:
        # Next to LastPx/LastQty, where a reader of the file looks for the trade's fields.
        indent, quote = anchor.group(1), anchor.group(2)
        at = head.end() + anchor.end()
    else:
        line_start = xml.rfind("\n", 0, end) + 1
        indent, quote, at = xml[line_start:end] + " ", "'", line_start
    line = f"{indent}<field name={quote}TrdMatchID{quote} required={quote}N{quote} />\n"
    return xml[:at] + line + xml[at:]


def acceptor_dictionary(xml: str, msg_types: Iterable[str],
                        written: Mapping[str, Iterable[int]] | None = None) -> str:
    """Return ``xml`` with only the messages ``msg_types`` and what they use, for the acceptor.

    Kept whole: the header, the trailer, each kept message with its components and groups, and every
    field they list, with its type and enum values, so a kept message validates exactly as with
    ``xml``. Dropped: the other messages, the components and fields nothing kept uses, and enum
    descriptions (QuickFIX keeps them only as names; validation never reads them).

    ``written`` (MsgType -> tags) slims the messages the acceptor only sends: each keeps only the
    listed tags and its required fields, where the message lists them (components expanded, groups
    kept as groups), in the same order. QuickFIX needs an outgoing message's dictionary only to
    store and resend it (a resend parses the stored text: a group it does not know would be torn
    apart), and each session's copy of the dictionary costs memory.
    """
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise DictionaryError(f"not a QuickFIX data dictionary: {exc}") from None
    sections = {name: root.find(name) for name in ("header", "trailer", "messages", "components", "fields")}
    missing = [name for name, node in sections.items() if node is None]
    if root.tag != "fix" or missing:
        raise DictionaryError(f"not a QuickFIX data dictionary: no <fix> root with <{'>, <'.join(missing)}>")
    messages, components, fields = sections["messages"], sections["components"], sections["fields"]
    assert messages is not None and components is not None and fields is not None
    wanted = set(msg_types)
    present = {m.get("msgtype") for m in messages.iter("message")}
    if wanted - present:
        raise DictionaryError(f"the dictionary has no message of type {', '.join(sorted(wanted - present))}")
    for message in list(messages):
        if message.get("msgtype") not in wanted:
            messages.remove(message)
    by_name = {c.get("name", ""): c for c in components}
    if written:
        numbers = {f.get("name", ""): int(f.get("number", "0")) for f in fields}
        for message in messages:
            tags = written.get(message.get("msgtype", ""))
            if tags is not None:
                kept = _slim(message, True, frozenset(tags), by_name, numbers)
                for child in list(message):
                    message.remove(child)
                message.extend(kept)
    used_components: set[str] = set()
    used_fields: set[str] = set()

    def walk(node: ET.Element) -> None:
        for child in node:
            name = child.get("name", "")
            if child.tag in ("field", "group"):
                used_fields.add(name)
            if child.tag == "group":
                walk(child)
            elif child.tag == "component" and name not in used_components:
                if name not in by_name:
                    raise DictionaryError(f"component {name} is used but not defined")
                used_components.add(name)
                walk(by_name[name])

    for section in (sections["header"], sections["trailer"], *messages):
        assert section is not None
        walk(section)
    for component in list(components):
        if component.get("name") not in used_components:
            components.remove(component)
    for definition in list(fields):
        if definition.get("name") not in used_fields:
            fields.remove(definition)
            continue
        for value in definition:
            value.attrib.pop("description", None)
    return ET.tostring(root, encoding="unicode") + "\n"


def fixt_transport_dictionary(xml: str, appl_ver_id: str) -> str:
    """Return ``xml`` (a QuickFIX FIXT11.xml) for an acceptor that speaks only ``appl_ver_id``.

    ApplVerID (1128) keeps that one value: a message that names another version in its header gets
    the engine's session Reject (373=5, value incorrect for this tag). (A Logon's DefaultApplVerID
    is the acceptor's to check: services/gateway/acceptor.py refuses another value with a Logout.)
    """
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise DictionaryError(f"not a QuickFIX data dictionary: {exc}") from None
    for definition in root.iter("field"):
        if definition.get("number") == "1128":
            for value in list(definition):
                if value.get("enum") != appl_ver_id:
                    definition.remove(value)
    return ET.tostring(root, encoding="unicode") + "\n"


def _slim(node: ET.Element, required: bool, tags: frozenset[int], components: Mapping[str, ET.Element],
          numbers: Mapping[str, int]) -> list[ET.Element]:
    """The fields and groups of ``node`` that are in ``tags`` or required, components expanded."""
    out: list[ET.Element] = []
    for child in node:
        name = child.get("name", "")
        needed = required and child.get("required") == "Y"  # QuickFIX: required where its parents are
        if child.tag == "component":
            if name not in components:
                raise DictionaryError(f"component {name} is used but not defined")
            out += _slim(components[name], needed, tags, components, numbers)
        elif child.tag in ("field", "group") and (needed or numbers.get(name) in tags):
            kept = ET.Element(child.tag, name=name, required="Y" if needed else "N")
            if child.tag == "group":
                # The first field of an entry delimits the entries: it stays, whatever ``tags`` say.
                first = numbers.get(_first_field(child, components), 0)
                kept.extend(_slim(child, True, tags | {first}, components, numbers))
            out.append(kept)
    return out


def _first_field(node: ET.Element, components: Mapping[str, ET.Element]) -> str:
    for child in node:
        if child.tag in ("field", "group"):
            return child.get("name", "")
        if child.tag == "component":
            return _first_field(components[child.get("name", "")], components)
    return ""


def write_exchange_dictionary(dest: Path, source: Path | None = None) -> Path:
    """Derive the exchange's dictionary from ``source`` (default: the installed one) into ``dest``.

    The file is replaced atomically, and only when its content changes, so that several processes
    may derive it into the same place at once.
    """
    source = installed_dictionary() if source is None else source
    try:
        text = exchange_dictionary(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DictionaryError(f"cannot read the FIX 4.4 dictionary {source}: {exc.strerror}") from None
    return _write_if_changed(dest, text)


def write_acceptor_dictionary(dest: Path, exchange: Path, msg_types: Iterable[str],
                              written: Mapping[str, Iterable[int]] | None = None) -> Path:
    """Trim the exchange's dictionary file ``exchange`` to ``msg_types`` (``written``: see
    ``acceptor_dictionary``) into ``dest``."""
    try:
        text = acceptor_dictionary(exchange.read_text(encoding="utf-8"), msg_types, written)
    except OSError as exc:
        raise DictionaryError(f"cannot read the exchange's dictionary {exchange}: {exc.strerror}") from None
    return _write_if_changed(dest, text)


def write_fixt_transport_dictionary(dest: Path, source: Path, msg_types: Iterable[str],
                                    appl_ver_id: str) -> Path:
    """Trim the FIXT11.xml ``source`` to ``msg_types`` for an acceptor that speaks ``appl_ver_id``
    only (``fixt_transport_dictionary``) into ``dest``."""
    try:
        text = acceptor_dictionary(source.read_text(encoding="utf-8"), msg_types)
    except OSError as exc:
        raise DictionaryError(f"cannot read the FIXT dictionary {source}: {exc.strerror}") from None
    return _write_if_changed(dest, fixt_transport_dictionary(text, appl_ver_id))


def _write_if_changed(dest: Path, text: str) -> Path:
    try:
        if dest.read_text(encoding="utf-8") == text:
            return dest
    except OSError:
        pass
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return dest


def exchange_dictionary_file(directory: Path | None = None) -> Path:
    """The exchange's dictionary as a file in ``directory`` (default: a per-user cache folder)."""
    if directory is None:
        directory = Path(tempfile.gettempdir()) / f"fixlab-{os.getuid()}"
    return write_exchange_dictionary(directory / FILE_NAME)


def client_dictionary_file(source: Path, directory: Path | None = None,
                           messages: Iterable[str] = EXCHANGE_MESSAGES) -> Path:
    """``source`` (a stock dictionary) cut to the messages the exchange speaks (``messages``), each kept
    whole, as a file in ``directory`` (default: a per-user cache folder), written once per source file.

    For a client of the exchange it validates as ``source`` does: every message that can cross its
    session keeps every field, component, group and enum value ``source`` gives it. QuickFIX loads the
    whole FIX50SP2.xml in ~1.5 s here (5 s on a busy machine), this cut in a tenth of that.
    """
    if directory is None:
        directory = Path(tempfile.gettempdir()) / f"fixlab-{os.getuid()}"
    try:
        stat = source.stat()
    except OSError as exc:
        raise DictionaryError(f"cannot read the FIX data dictionary {source}: {exc.strerror}") from None
    # The name says which source file, as it was, and which messages: a changed one gets a new cut.
    wanted = frozenset(messages)
    key = f"{source.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{','.join(sorted(wanted))}"
    dest = directory / f"FIXLAB-client-{source.stem}-{zlib.crc32(key.encode()):08x}.xml"
    if dest.is_file():
        return dest
    text = source.read_text(encoding="utf-8")
    msg_types = wanted & {m.group(2) for m in _MSGTYPE.finditer(text)}
    session = {m.get("msgtype", "") for m in ET.fromstring(text).iter("message")
               if m.get("msgcat") == "admin"}
    return _write_if_changed(dest, acceptor_dictionary(text, msg_types | session))


# ------------------------------------------------------------------------------- names of tags


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
class GroupDef:
    """A repeating group: its count tag (NoXxx), the field each entry starts with (the delimiter),
    the fields an entry may hold, and the groups nested in an entry, by count tag."""

    count_tag: int
    delimiter: int
    fields: frozenset[int]
    groups: dict[int, GroupDef]


@dataclass(frozen=True, slots=True)
class Dictionary:
    """Fields by tag, messages by MsgType, and which tags belong to the header and trailer."""

    begin_string: str
    fields: dict[int, FieldDef]
    messages: dict[str, MessageDef]
    header_tags: frozenset[int]
    trailer_tags: frozenset[int]
    # Each message's repeating groups (components expanded), by MsgType, then by count tag.
    groups: Mapping[str, dict[int, GroupDef]] = field(default_factory=dict)
    # Every tag each message may hold in its body, by MsgType (components and groups expanded).
    bodies: Mapping[str, frozenset[int]] = field(default_factory=dict)

    def top_level(self, msg_type: str) -> frozenset[int]:
        """The tags a message holds outside its repeating groups (components expanded)."""
        return self.bodies.get(msg_type, frozenset()) - _group_tags(self.groups.get(msg_type, {}))

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
    components = {c.attrib.get("name", ""): c for c in root.find("components") or ()}
    nodes = {m.attrib["msgtype"]: m for m in root.iter("message") if "msgtype" in m.attrib}

    @functools.cache
    def shape(msg_type: str) -> tuple[dict[int, GroupDef], frozenset[int]]:
        tags, inner = _members(nodes[msg_type], by_name, components, set())
        return inner, frozenset(tags) | _group_tags(inner)

    # Worked out per message the first time it is asked for: FIX 5.0 SP2's 156 messages, their
    # components expanded, took 0.5 s of a client's start, which reads a handful of them.
    groups = _Lazy(nodes, lambda t: shape(t)[0])
    bodies = _Lazy(nodes, lambda t: shape(t)[1])
    header = {by_name[n] for n in _names_in(root.find("header")) if n in by_name}
    trailer = {by_name[n] for n in _names_in(root.find("trailer")) if n in by_name}
    return Dictionary(begin, fields, messages, frozenset(header), frozenset(trailer), groups, bodies)


class _Lazy(Mapping[str, _V]):
    """A read-only mapping over ``keys`` whose values ``compute`` makes on first access."""

    def __init__(self, keys: Iterable[str], compute: Callable[[str], _V]) -> None:
        self._keys = tuple(keys)
        self._known = frozenset(self._keys)
        self._compute = compute

    def __getitem__(self, key: str) -> _V:
        if key not in self._known:
            raise KeyError(key)
        return self._compute(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._known


def _group_tags(groups: dict[int, GroupDef]) -> frozenset[int]:
    out: set[int] = set()
    for count, group in groups.items():
        out.add(count)
        out |= group.fields
        out |= _group_tags(group.groups)
    return frozenset(out)


def _members(node: ET.Element, by_name: dict[str, int], components: dict[str, ET.Element],
             seen: set[str]) -> tuple[list[int], dict[int, GroupDef]]:
    """The fields (in order) and groups directly in ``node``, its components expanded."""
    tags: list[int] = []
    groups: dict[int, GroupDef] = {}
    for child in node:
        name = child.attrib.get("name", "")
        if child.tag == "field" and name in by_name:
            tags.append(by_name[name])
        elif child.tag == "component" and name in components and name not in seen:
            inner_tags, inner_groups = _members(components[name], by_name, components, seen | {name})
            tags += inner_tags
            groups.update(inner_groups)
        elif child.tag == "group" and name in by_name:
            inner_tags, inner_groups = _members(child, by_name, components, seen)
            first = inner_tags[0] if inner_tags else next(iter(inner_groups), 0)
            count = by_name[name]
            members = frozenset(inner_tags) | frozenset(inner_groups)
            groups[count] = GroupDef(count, first, members, inner_groups)
    return tags, groups


_MSGTYPE = re.compile(r"""<message\s[^>]*msgtype=(['"])([^'"]+)\1""")


def message_types(path: Path) -> frozenset[str]:
    """The MsgTypes a dictionary file defines, read without building the whole dictionary (FIX 5.0
    SP2's, parsed, holds ~34 MiB of Python objects)."""
    try:
        return frozenset(m.group(2) for m in _MSGTYPE.finditer(path.read_text(encoding="utf-8")))
    except OSError as exc:
        raise DictionaryError(f"cannot read the FIX data dictionary {path}: {exc.strerror}") from None


@functools.cache
def load(path: str | None = None) -> Dictionary:
    """The dictionary at ``path`` (default: the quickfix package's FIX44.xml), parsed once."""
    p = Path(path) if path else installed_dictionary()
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise DictionaryError(f"cannot read the FIX data dictionary {p}: {exc.strerror}") from None
    return parse_dictionary(data)


@functools.cache
def load_version(name: str, app_file: str | None = None) -> Dictionary:
    """The names of FIX version ``name`` ("4.2", "4.4", "5.0SP2": ``shared.fix.versions``), from the
    dictionaries the quickfix package installs, parsed once. FIXT.1.1: FIXT11.xml's header, trailer and
    session messages with FIX50SP2.xml's application messages, as a FIX 5.0 SP2 engine reads them.
    ``app_file``: another file for the application messages (the terminal client's cut of them,
    ``client_dictionary_file``, which names everything its session can carry in a third of the time)."""
    from shared.fix.versions import version

    v = version(name)
    app = load(app_file or str(v.app_dictionary()))
    if not v.fixt:
        return app
    transport = load(str(v.transport_dictionary()))
    fields = {**app.fields, **transport.fields}
    msg_type = transport.fields.get(35)
    if msg_type is not None and 35 in app.fields:  # every MsgType named, the session's and the application's
        fields[35] = FieldDef(35, msg_type.name, msg_type.type, {**app.fields[35].enums, **msg_type.enums})
    return Dictionary(v.begin_string, fields, {**app.messages, **transport.messages}, transport.header_tags,
                      transport.trailer_tags, ChainMap(dict(transport.groups), app.groups),  # type: ignore[arg-type]
                      ChainMap(dict(transport.bodies), app.bodies))  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m shared.fix.dictionary",
        description="Write the exchange's FIX 4.4 dictionary (QuickFIX's FIX44.xml with TrdMatchID 880 "
                    "in ExecutionReport). Validate what the exchange sends with it.")
    parser.add_argument("--out", required=True, help="file to write, or - for standard output")
    parser.add_argument("--source", type=Path, default=None,
                        help=f"the FIX44.xml to start from (default: {installed_dictionary()})")
    args = parser.parse_args(argv)
    try:
        if args.out == "-":
            source = args.source or installed_dictionary()
            sys.stdout.write(exchange_dictionary(source.read_text(encoding="utf-8")))
            return 0
        path = write_exchange_dictionary(Path(args.out), args.source)
    except (DictionaryError, OSError) as exc:
        print(f"dictionary: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
