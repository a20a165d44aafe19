"""Parse one raw FIX message into named fields. Pure, and never raises on bad bytes.

Malformed, fragmented and unknown-tag input is reported in the result (``problems``), field by
field, so the page can show exactly what was on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from services.web.dictionary import Dictionary

SOH = b"\x01"


class WireField(NamedTuple):
    """One field as read (a tuple: cheap to build, hundreds per second on a busy wire)."""

    tag: int | None  # None when the field has no numeric tag
    name: str  # FIX 4.4 field name; "" when unknown
    value: str
    meaning: str  # enumerated value explained; "" when not an enum
    section: str  # "header", "body" or "trailer"


@dataclass(slots=True)
class ParsedMessage:
    fields: list[WireField]
    msg_type: str
    msg_name: str
    category: str  # "session", "app" or "unknown"
    seq: int | None
    problems: list[str] = field(default_factory=list)

    def get(self, tag: int) -> str | None:
        for f in self.fields:
            if f.tag == tag:
                return f.value
        return None


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def checksum(data: bytes) -> int:
    return sum(data) % 256


def parse(raw: bytes, d: Dictionary) -> ParsedMessage:
    """Split ``raw`` on SOH and name every field; problems are listed, never raised."""
    out: list[WireField] = []
    problems: list[str] = []
    pieces = raw.split(SOH)
    complete = raw.endswith(SOH)
    if complete:
        pieces = pieces[:-1]
    elif raw:
        problems.append("message does not end with SOH: it is cut short")
    offset = 0
    body_start = body_end = None
    for i, piece in enumerate(pieces):
        tag_b, eq, value_b = piece.partition(b"=")
        value = _text(value_b)
        if not eq or not tag_b.isdigit():
            problems.append(f"field {i + 1} is not tag=value: {_text(piece)[:40]!r}")
            out.append(WireField(None, "", _text(piece), "", "body"))
        else:
            tag = int(tag_b)
            name = d.field_name(tag)
            if not name:
                problems.append(f"tag {tag} is not in the {d.begin_string} dictionary")
            out.append(WireField(tag, name, value, d.meaning(tag, value) if name else "",
                                 d.section(tag)))
            if tag == 9:
                body_start = offset + len(piece) + 1
            elif tag == 10:
                body_end = offset
                if (complete or i < len(pieces) - 1) and value.isdigit() and len(value) == 3:
                    expected = checksum(raw[:offset])
                    if int(value) != expected:
                        problems.append(f"CheckSum is {value}, the bytes sum to {expected:03d}")
        offset += len(piece) + 1
    tags = [f.tag for f in out]
    if tags[:3] != [8, 9, 35]:
        problems.append("a message starts with BeginString(8), BodyLength(9), MsgType(35)")
    if 10 not in tags:
        problems.append("no CheckSum(10): the message is incomplete")
    length = next((f.value for f in out if f.tag == 9), None)
    if length is not None and body_start is not None and body_end is not None and length.isdigit() \
            and int(length) != body_end - body_start:
        problems.append(f"BodyLength is {length}, the body is {body_end - body_start} bytes")
    msg_type = next((f.value for f in out if f.tag == 35), "")
    mdef = d.messages.get(msg_type)
    seq_text = next((f.value for f in out if f.tag == 34), "")
    return ParsedMessage(
        fields=out,
        msg_type=msg_type,
        msg_name=mdef.name if mdef else (f"MsgType {msg_type}" if msg_type else "unreadable"),
        category=mdef.category if mdef else "unknown",
        seq=int(seq_text) if seq_text.isdigit() else None,
        problems=problems,
    )


def readable(raw: bytes) -> str:
    """The raw message with SOH shown as '|', the way FIX people write it."""
    return _text(raw).replace("\x01", "|")
