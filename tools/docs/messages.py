"""The FIX messages the exchange accepts and sends, per version, with each message's fields.

Read at build time from shared.fix.dictionary (RECEIVED_MESSAGES, SENT_MESSAGES, and each version's
dictionary as the quickfix package installs it, loaded by load_version as the gateway's names are).
"""

from __future__ import annotations

from shared.fix.dictionary import RECEIVED_MESSAGES, SENT_MESSAGES, Dictionary, load_version
from shared.fix.versions import VERSIONS


def _message_rows(d: Dictionary, msg_types: frozenset[str]) -> list[str]:
    rows = []
    for msg_type in sorted(msg_types):
        message = d.messages.get(msg_type)
        if message is None:
            continue
        tags = sorted(d.top_level(msg_type))
        fields = ", ".join(f"{d.fields[t].name} ({t})" for t in tags if t in d.fields)
        rows.append(f"| `{msg_type}` | {message.name} | {fields} |")
    return rows


def markdown() -> str:
    lines = ["# FIX messages per version", "",
             "Generated at build time from the dictionaries the gateway loads (tools/docs/messages.py): "
             "the application messages the exchange accepts and sends, and the fields each message may "
             "carry outside its repeating groups in that version's dictionary.", ""]
    for name, v in VERSIONS.items():
        d = load_version(name)
        session = frozenset(t for t, m in d.messages.items() if m.category == "session")
        lines += [f"## FIX {name} ({v.begin_string})", ""]
        for title, types in (("Accepted from clients", RECEIVED_MESSAGES), ("Sent to clients", SENT_MESSAGES),
                             ("Session messages", session)):
            lines += [f"### {title}", "", "| MsgType | Message | Fields |", "|---|---|---|",
                      *_message_rows(d, types), ""]
    return "\n".join(lines)
