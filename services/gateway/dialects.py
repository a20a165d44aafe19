"""What the exchange says in FIX 4.4, said to a session of another version: one rewrite per version.

The gateway builds every message it sends as a FIX 4.4 body (from tag 35 on: outbound.py, inbound.py's
refusals, securities.py, marketdata.py). A session of FIX 4.2 or FIX 5.0 SP2 gets that body through
its version's ``Dialect``, chosen once, when QuickFIX creates the session (``SessionRegistry``): a
FIX 4.4 session has none and its bodies go out as built, with no test per message. What each
version changes is the table of ``shared.fix.versions``; what its dictionary lists (the tags of each
message, enum values) is read from the dictionary the acceptor validates that version with, so a
rewritten body holds only what a strict client of that version accepts. A message type the version
needs nothing changed in (every type but W and r in FIX 5.0 SP2) passes after one set lookup.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from shared.fix.dictionary import WRITTEN, Dictionary
from shared.fix.versions import FixVersion

SOH = "\x01"
_TRANS_NEW = "20=0"  # ExecTransType (FIX 4.2), inserted after ExecID (17)
_TRANS_STATUS = "20=3"
_EXEC_TYPE = SOH + "150="
_RESTATED = SOH + "150=D" + SOH  # a triggered stop, as FIX 4.4 says it (services/gateway/outbound.py)
_MD_TYPES = frozenset(("W", "X"))


class Dialect:
    """Rewrite FIX 4.4 bodies for sessions of ``version``, whose (acceptor's) dictionary is ``dictionary``."""

    def __init__(self, version: FixVersion, dictionary: Dictionary) -> None:
        self.version = version
        self.dictionary = dictionary
        # Per MsgType, the tags this version lists in the message (groups and components included).
        self.listed: dict[str, frozenset[int]] = dict(dictionary.bodies)
        self.enums: Mapping[int, frozenset[str]] = {
            tag: frozenset(dictionary.fields[tag].enums) for tag in version.enum_fallback
            if tag in dictionary.fields and dictionary.fields[tag].enums}
        # ExecutionReport tags whose presence needs the whole rewrite (unlisted, or enum fallbacks).
        unlisted = WRITTEN["8"] - self.listed.get("8", frozenset())
        self._markers = tuple(f"{SOH}{tag}=" for tag in sorted(unlisted | set(version.enum_fallback)))
        # The message types this version changes something in; every other passes as it is.
        self.active = frozenset(t for t, tags in WRITTEN.items() if t in self.listed and (
            tags - self.listed[t] or t in version.required_added
            or (t == "8" and (version.exec_trans_type or version.match_id_in_text))
            or tags & frozenset(self.enums)))
        # Types changed only by leaving out tags this version does not list there (FIX 4.2's X: the
        # TradingSessionSubID of an indicative entry): a body holding none of them passes as it is.
        self._unlisted = {t: tuple(f"{SOH}{tag}=" for tag in sorted(WRITTEN[t] - self.listed[t]))
                          for t in self.active if t != "8" and t not in version.required_added
                          and not WRITTEN[t] & frozenset(self.enums)}
        triggered = version.triggered_exec_type
        self._triggered = f"{SOH}150={triggered}{SOH}" if triggered else ""
        # Market data entries of a type this version says otherwise: (FIX 4.4's, this version's).
        self._md_types = tuple((f"{SOH}269={old}{SOH}", f"{SOH}269={new}{SOH}")
                               for old, new in version.md_entry_types.items())

    def __call__(self, body: str) -> str:
        """The body (from tag 35 on, SOH-terminated) as this version says it."""
        msg_type = body[3:body.find(SOH)]
        if self._triggered and msg_type == "8" and _RESTATED in body:
            body = body.replace(_RESTATED, self._triggered, 1)
        if self._md_types and msg_type in _MD_TYPES:
            for old, new in self._md_types:
                if old in body:
                    body = body.replace(old, new)
        if msg_type not in self.active:
            return body
        unlisted = self._unlisted.get(msg_type)
        if unlisted is not None:
            for marker in unlisted:
                if marker in body:
                    break
            else:
                return body
        if msg_type == "8" and self.version.exec_trans_type:
            # The common reports (New, Canceled, Replaced) need ExecTransType only: ~1 us, where the
            # whole rewrite below takes ~10 (FIX 4.2's sessions at full speed).
            at = body.find(_EXEC_TYPE)
            if (at > 0 and body[at + 5] in "045" and body[at + 6] == SOH
                    and not any(marker in body for marker in self._markers)):
                return body[:at] + SOH + _TRANS_NEW + body[at:]
        parts = body.split(SOH)
        if parts[-1] == "":
            parts.pop()
        listed = self.listed[msg_type]
        version = self.version
        values: dict[int, str] = {}
        out: list[str] = []
        for part in parts:
            tag_text, _, value = part.partition("=")
            tag = int(tag_text) if tag_text.isdigit() else -1
            values.setdefault(tag, value)
            if tag != 35 and tag not in listed:
                continue  # not in this version's message: a strict client would Reject it
            fallback = version.enum_fallback.get(tag)
            if fallback is not None and value not in self.enums.get(tag, (value,)):
                part = f"{tag}={fallback}"
            out.append(part)
        if msg_type == "8" and version.exec_trans_type:
            out = self._exec_trans(out, values.get(150, ""), values.get(39, ""))
        match_id = values.get(527) or values.get(880)
        if msg_type == "8" and version.match_id_in_text and match_id and 58 not in values:
            out.append(f"58=TrdMatchID={match_id}")
        for tag, source in version.required_added.get(msg_type, {}).items():
            if tag not in values:
                out.append(f"{tag}={_value(source, values)}")
        return SOH.join(out) + SOH

    @staticmethod
    def _exec_trans(parts: list[str], exec_type: str, status: str) -> list[str]:
        """FIX 4.2's ExecutionReport: ExecTransType, and no ExecType F (Trade) nor I (Order status)."""
        trans = _TRANS_NEW
        if exec_type == "F":  # a fill: Partial fill (1) or Fill (2), as its OrdStatus says
            new_type = "2" if status == "2" else "1"
        elif exec_type == "I":  # an order status report: ExecTransType Status, ExecType its state
            new_type, trans = status, _TRANS_STATUS
        else:
            new_type = exec_type
        out: list[str] = []
        for part in parts:
            if part.startswith("150="):
                part = "150=" + new_type
            out.append(part)
            if part.startswith("17="):
                out.append(trans)
        return out


def _value(source: str, values: Mapping[int, str]) -> str:
    if source == "now":
        return time.strftime("%Y%m%d-%H:%M:%S", time.gmtime())
    if source.startswith("tag:"):
        return values.get(int(source[4:]), "") or "NONE"
    raise ValueError(f"unknown value source {source!r}")


def dialects(versions: Mapping[str, tuple[FixVersion, Dictionary]]) -> dict[str, Dialect]:
    """A Dialect per BeginString, for the versions whose table rewrites anything (FIX 4.4's bodies
    go out as built)."""
    return {begin: Dialect(v, d) for begin, (v, d) in versions.items() if v.rewrites}
