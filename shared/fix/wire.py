"""Parse one raw FIX message into named fields. Pure, and never raises on bad bytes.

Malformed, fragmented and unknown-tag input is reported in the result (``problems``), field by
field, so the page can show exactly what was on the wire.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from shared.fix.codec import SOH, framing_problems, pairs
from shared.fix.dictionary import Dictionary, GroupDef


class WireField(NamedTuple):
    """One field as read (a tuple: cheap to build, hundreds per second on a busy wire)."""

    tag: int | None  # None when the field has no numeric tag
    name: str  # FIX 4.4 field name; "" when unknown
    value: str
    meaning: str  # enumerated value explained; "" when not an enum
    section: str  # "header", "body" or "trailer"


@dataclass(slots=True)
class WireGroup:
    """A repeating group as read: its count field (NoXxx) and its entries, each a list of nodes."""

    count: WireField
    entries: list[list[Node]]


Node = WireField | WireGroup


@dataclass(slots=True)
class ParsedMessage:
    fields: list[WireField]
    msg_type: str
    msg_name: str
    category: str  # "session", "app" or "unknown"
    seq: int | None
    problems: list[str] = field(default_factory=list)
    tree: list[Node] = field(default_factory=list)  # the fields with repeating groups nested

    def get(self, tag: int) -> str | None:
        for f in self.fields:
            if f.tag == tag:
                return f.value
        return None


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def parse(raw: bytes, d: Dictionary) -> ParsedMessage:
    """Split ``raw`` on SOH and name every field; problems are listed, never raised."""
    out: list[WireField] = []
    problems: list[str] = []
    if raw and not raw.endswith(SOH):
        problems.append("message does not end with SOH: it is cut short")
    for i, (tag, value) in enumerate(pairs(_text(raw))):
        if tag is None:
            problems.append(f"field {i + 1} is not tag=value: {value[:40]!r}")
            out.append(WireField(None, "", value, "", "body"))
            continue
        name = d.field_name(tag)
        if not name:
            problems.append(f"tag {tag} is not in the {d.begin_string} dictionary")
        out.append(WireField(tag, name, value, d.meaning(tag, value) if name else "", d.section(tag)))
    tags = [f.tag for f in out]
    if tags[:3] != [8, 9, 35]:
        problems.append("a message starts with BeginString(8), BodyLength(9), MsgType(35)")
    if 10 not in tags:
        problems.append("no CheckSum(10): the message is incomplete")
    problems += framing_problems(raw)
    msg_type = next((f.value for f in out if f.tag == 35), "")
    tree = nest(out, d.groups.get(msg_type, {}), problems)
    mdef = d.messages.get(msg_type)
    seq_text = next((f.value for f in out if f.tag == 34), "")
    return ParsedMessage(
        fields=out,
        msg_type=msg_type,
        msg_name=mdef.name if mdef else (f"MsgType {msg_type}" if msg_type else "unreadable"),
        category=mdef.category if mdef else "unknown",
        seq=int(seq_text) if seq_text.isdigit() else None,
        problems=problems,
        tree=tree,
    )


def nest(fields: list[WireField], groups: dict[int, GroupDef], problems: list[str]) -> list[Node]:
    """The fields in wire order with each repeating group as a node of its entries.

    A group's count field opens it; its delimiter starts each entry; a field the entry may hold, and
    holds not yet, joins it; anything else closes the group (and any nested in it). A count that
    does not match the entries that follow is listed in ``problems``.
    """
    top: list[Node] = []
    # open groups, innermost last: (definition, node, declared count, tags in the current entry)
    stack: list[tuple[GroupDef, WireGroup, int, set[int]]] = []

    def close() -> None:
        gdef, node, declared, _ = stack.pop()
        if len(node.entries) != declared:
            name = node.count.name or str(gdef.count_tag)
            problems.append(f"{name}({gdef.count_tag})={node.count.value} but {len(node.entries)} "
                            f"{'entry follows' if len(node.entries) == 1 else 'entries follow'}")

    for f in fields:
        if f.section != "body" or f.tag is None:
            while stack:
                close()
        target = top
        tag = f.tag
        while stack and tag is not None:
            open_def, node, declared, seen = stack[-1]
            if tag == open_def.delimiter and len(node.entries) < declared:
                node.entries.append([])
                seen.clear()
            elif not (node.entries and tag in open_def.fields and tag not in seen):
                close()
                continue
            seen.add(tag)
            target = node.entries[-1]
            break
        level = stack[-1][0].groups if stack else groups
        new_def = level.get(tag) if tag is not None else None
        if new_def is None:
            target.append(f)
            continue
        group = WireGroup(f, [])
        target.append(group)
        count = int(f.value) if f.value.isdigit() else 0
        if not f.value.isdigit():
            problems.append(f"{f.name or tag}({tag})={f.value} is not a number of entries")
        stack.append((new_def, group, count, set()))
    while stack:
        close()
    return top


def readable(raw: bytes) -> str:
    """The raw message with SOH shown as '|', the way FIX people write it."""
    return _text(raw).replace("\x01", "|")


# The header and trailer fields a one-line view leaves out: the line's own head names them
# (MsgType, MsgSeqNum) or they are the same on every message of a session.
LINE_SKIPS = frozenset({8, 9, 35, 34, 49, 56, 52, 10})


def field_text(f: WireField) -> str:
    """``Side(54)=1 (Buy)``: a field named as the page names it (name, tag, value, meaning)."""
    name = f"{f.name}({f.tag})" if f.name else f"{f.tag}" if f.tag is not None else "?"
    return f"{name}={f.value}" + (f" ({f.meaning})" if f.meaning else "")


def nodes_text(nodes: list[Node], skip: frozenset[int] = LINE_SKIPS) -> str:
    """Fields in wire order; a repeating group as ``NoX(n)=2 [{entry} {entry}]``."""
    out: list[str] = []
    for n in nodes:
        if isinstance(n, WireGroup):
            entries = " ".join("{" + nodes_text(e, frozenset()) + "}" for e in n.entries)
            out.append(f"{field_text(n.count)} [{entries}]")
        elif n.tag not in skip:
            out.append(field_text(n))
    return " ".join(out)


def line(p: ParsedMessage, source: str, withheld: bool = False) -> str:
    """One message on one line: direction, name, MsgType and MsgSeqNum, then every other field."""
    arrow = "->" if source == "client" else "<-"
    seq = f" #{p.seq}" if p.seq is not None else ""
    head = f"{arrow} {p.msg_name} 35={p.msg_type}{seq}"
    if withheld:
        head += " [withheld by the tap]"
    body = nodes_text(p.tree or list(p.fields))
    problems = f" !! {'; '.join(p.problems)}" if p.problems else ""
    return f"{head}  {body}{problems}" if body else head + problems
