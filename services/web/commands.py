"""The page's WebSocket commands: JSON in, checked against a fixed schema, typed out.

Every problem is a ``CommandError`` with a message the page shows; nothing here does I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

OPS = ("logon", "order", "cancel", "replace", "drop_next", "silent", "talk", "logout", "ping")

_SYMBOL = re.compile(r"^[A-Z][A-Z0-9.]{0,15}$")
_PRICE = re.compile(r"^[0-9]{1,9}(\.[0-9]{1,8})?$")
_CLORDID = re.compile(r"^[\x21-\x7e]{1,64}$")  # printable ASCII, no SOH or spaces
MAX_QTY = 1_000_000_000
SIDES = {"buy": 1, "sell": 2}

# Which keys each op takes, and which it needs (the schema documented in docs/websocket.md).
_KEYS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "logon": (frozenset(), frozenset()),
    "order": (frozenset({"symbol", "side", "price", "qty"}), frozenset({"symbol", "side", "price", "qty"})),
    "cancel": (frozenset({"clordid"}), frozenset({"clordid"})),
    "replace": (frozenset({"clordid", "price", "qty"}), frozenset({"clordid", "price", "qty"})),
    "drop_next": (frozenset(), frozenset()),
    "silent": (frozenset(), frozenset()),
    "talk": (frozenset(), frozenset()),
    "logout": (frozenset(), frozenset()),
    "ping": (frozenset(), frozenset()),
}


class CommandError(ValueError):
    """A command the page sent that does not fit the protocol; the text is for the visitor."""


@dataclass(frozen=True, slots=True)
class Command:
    op: str
    id: str | None = None  # the page's own correlation id, echoed in errors
    symbol: str = ""
    side: int = 0
    price: str = ""
    qty: int = 0
    clordid: str = ""


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."


def _qty(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise CommandError(f"qty must be a whole number, not {_short(value)}")
    if isinstance(value, str):
        if not value.strip().isdigit():
            raise CommandError(f"qty must be a whole number, not {_short(value)}")
        value = int(value.strip())
    if not 1 <= value <= MAX_QTY:
        raise CommandError(f"qty must be between 1 and {MAX_QTY}, not {value}")
    return value


def _price(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise CommandError(f"price must be a decimal number like 100.25, not {_short(value)}")
    text = value.strip() if isinstance(value, str) else repr(value)
    if not _PRICE.match(text):
        raise CommandError(f"price must be a positive decimal like 100.25, not {_short(value)}")
    return text


def parse_command(text: str | bytes, max_bytes: int) -> Command:
    """Check one WebSocket frame against the command schema and return it typed."""
    size = len(text.encode() if isinstance(text, str) else text)
    if size > max_bytes:
        raise CommandError(f"command is {size} bytes; the limit is {max_bytes}")
    try:
        obj = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CommandError(f"command is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise CommandError("command must be a JSON object like {\"op\": \"logon\"}")
    op = obj.get("op")
    if not isinstance(op, str) or op not in _KEYS:
        raise CommandError(f"unknown op {_short(op)}; known ops: {', '.join(OPS)}")
    cid = obj.get("id")
    if cid is not None and not (isinstance(cid, str | int) and not isinstance(cid, bool)
                                and len(str(cid)) <= 64):
        raise CommandError("id must be a string or number of up to 64 characters")
    allowed, required = _KEYS[op]
    extra = set(obj) - allowed - {"op", "id"}
    if extra:
        raise CommandError(f"{op} does not take {', '.join(sorted(extra))}")
    missing = required - set(obj)
    if missing:
        raise CommandError(f"{op} needs {', '.join(sorted(missing))}")
    cmd_id = None if cid is None else str(cid)
    if op == "order":
        symbol = obj["symbol"]
        if not isinstance(symbol, str) or not _SYMBOL.match(symbol):
            raise CommandError(f"symbol must be an instrument like ACORN.LAB, not {_short(symbol)}")
        side = obj["side"]
        if side not in SIDES:
            raise CommandError(f"side must be \"buy\" or \"sell\", not {_short(side)}")
        return Command(op, cmd_id, symbol=symbol, side=SIDES[side], price=_price(obj["price"]),
                       qty=_qty(obj["qty"]))
    if op in ("cancel", "replace"):
        clordid = obj["clordid"]
        if not isinstance(clordid, str) or not _CLORDID.match(clordid):
            raise CommandError(f"clordid must be one of your orders' ClOrdIDs, not {_short(clordid)}")
        if op == "cancel":
            return Command(op, cmd_id, clordid=clordid)
        return Command(op, cmd_id, clordid=clordid, price=_price(obj["price"]), qty=_qty(obj["qty"]))
    return Command(op, cmd_id)
