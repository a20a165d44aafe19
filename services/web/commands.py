"""The page's WebSocket commands: JSON in, checked against a fixed schema, typed out.

Every problem is a ``CommandError`` with a message the page shows; nothing here does I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

OPS = ("logon", "order", "cancel", "replace", "status", "mass_cancel", "md_subscribe", "md_unsubscribe",
       "stp", "drop_next", "silent", "talk", "logout", "ping", "resume")

_SYMBOL = re.compile(r"^[A-Z][A-Z0-9.]{0,15}$")
_PRICE = re.compile(r"^[0-9]{1,9}(\.[0-9]{1,8})?$")
_HEX = re.compile(r"\A[0-9a-f]{1,64}\Z")
_CLORDID = re.compile(r"^[\x21-\x7e]{1,64}$")  # printable ASCII, no SOH or spaces
MAX_QTY = 1_000_000_000
SIDES = {"buy": 1, "sell": 2}
# TimeInForce (59): the page's names and the FIX values themselves (2 At the Opening, 7 At the Close:
# the matcher takes them in their call only; a FIX 4.2 session's engine cannot send 7).
TIFS = {"day": 0, "gtc": 1, "opg": 2, "ioc": 3, "fok": 4, "atc": 7}
# OrdType (40) by the page's names (shared.schema ORD_*); those that need a Price (44), a StopPx (99).
ORD_TYPES = {"market": 1, "limit": 2, "stop": 3, "stop_limit": 4}
PRICED = frozenset({2, 4})
STOPPED = frozenset({3, 4})
# Self-trade prevention modes (shared.schema STP_*), by the names the page uses.
STP_MODES = {"off": 0, "cancel_resting": 1, "cancel_aggressor": 2, "cancel_both": 3}
MAX_DEPTH = 100  # MarketDepth (264) a page may ask for; 0 is the whole book
FIX_VERSIONS = ("4.4", "4.2", "5.0SP2")  # a lab session's version (shared.fix.versions' names)

# Which keys each op takes, and which it needs (the schema documented in docs/websocket.md).
_KEYS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "logon": (frozenset({"version"}), frozenset()),
    "order": (frozenset({"symbol", "side", "price", "qty", "tif", "ord_type", "stop_px"}),
              frozenset({"symbol", "side", "qty"})),
    "cancel": (frozenset({"clordid"}), frozenset({"clordid"})),
    "replace": (frozenset({"clordid", "price", "qty"}), frozenset({"clordid", "price", "qty"})),
    "status": (frozenset({"clordid"}), frozenset({"clordid"})),
    "mass_cancel": (frozenset({"symbol"}), frozenset()),
    "md_subscribe": (frozenset({"symbol", "depth"}), frozenset({"symbol"})),
    "md_unsubscribe": (frozenset({"symbol"}), frozenset({"symbol"})),
    "stp": (frozenset({"mode"}), frozenset({"mode"})),
    "drop_next": (frozenset(), frozenset()),
    "silent": (frozenset(), frozenset()),
    "talk": (frozenset(), frozenset()),
    "logout": (frozenset(), frozenset()),
    "ping": (frozenset(), frozenset()),
    "resume": (frozenset({"lab_id", "token", "last_n"}), frozenset({"lab_id", "token"})),
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
    tif: int = 0  # TimeInForce (59) of an order
    ord_type: int = 2  # OrdType (40) of an order: ORD_TYPES' values, limit unless said
    stop_px: str = ""  # StopPx (99) of a stop or stop-limit order
    value: str = ""  # the op's own argument: MarketDepth for md_subscribe, the mode number for stp,
    # the FIX version for logon
    lab_id: str = ""  # resume: the session the page followed before its socket closed
    token: str = ""  # resume: the token logon_sent gave it
    last_n: int = 0  # resume: the last wire record it shows


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


def _symbol(value: Any) -> str:
    if not isinstance(value, str) or not _SYMBOL.match(value):
        raise CommandError(f"symbol must be an instrument like ACORN.LAB, not {_short(value)}")
    return value


def _tif(value: Any) -> int:
    if isinstance(value, str) and value.strip().lower() in TIFS:
        return TIFS[value.strip().lower()]
    if isinstance(value, str | int) and not isinstance(value, bool) \
            and str(value).strip() in ("0", "1", "2", "3", "4", "7"):
        return int(str(value).strip())
    raise CommandError("tif must be one of day, gtc, opg, ioc, fok, atc (TimeInForce 0, 1, 2, 3, 4, 7), "
                       f"not {_short(value)}")


def _ord_type(value: Any) -> int:
    if not isinstance(value, str) or value not in ORD_TYPES:
        raise CommandError(f"ord_type must be one of {', '.join(ORD_TYPES)}, not {_short(value)}")
    return ORD_TYPES[value]


def _depth(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip().isdigit() \
            or int(str(value).strip()) > MAX_DEPTH:
        raise CommandError(f"depth must be a whole number from 0 (the whole book) to {MAX_DEPTH}, "
                           f"not {_short(value)}")
    return int(str(value).strip())


def _clordid(value: Any) -> str:
    if not isinstance(value, str) or not _CLORDID.match(value):
        raise CommandError(f"clordid must be one of your orders' ClOrdIDs, not {_short(value)}")
    return value


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
        symbol = _symbol(obj["symbol"])
        side = obj["side"]
        if not isinstance(side, str) or side not in SIDES:
            raise CommandError(f"side must be \"buy\" or \"sell\", not {_short(side)}")
        ord_type = _ord_type(obj.get("ord_type", "limit"))
        name = next(k for k, v in ORD_TYPES.items() if v == ord_type).replace("_", "-")
        if ord_type in PRICED and "price" not in obj:
            raise CommandError(f"a {name} order needs a price")
        if ord_type not in PRICED and "price" in obj:
            raise CommandError(f"a {name} order takes no price (it trades at the market's)")
        if ord_type in STOPPED and "stop_px" not in obj:
            raise CommandError(f"a {name} order needs a stop_px: the trade price that sets it off")
        if ord_type not in STOPPED and "stop_px" in obj:
            raise CommandError(f"a {name} order takes no stop_px")
        return Command(op, cmd_id, symbol=symbol, side=SIDES[side],
                       price=_price(obj["price"]) if ord_type in PRICED else "",
                       qty=_qty(obj["qty"]), tif=_tif(obj.get("tif", "day")), ord_type=ord_type,
                       stop_px=_price(obj["stop_px"]) if ord_type in STOPPED else "")
    if op in ("cancel", "replace", "status"):
        clordid = _clordid(obj["clordid"])
        if op == "replace":
            return Command(op, cmd_id, clordid=clordid, price=_price(obj["price"]), qty=_qty(obj["qty"]))
        return Command(op, cmd_id, clordid=clordid)
    if op == "mass_cancel":
        which = obj.get("symbol")
        return Command(op, cmd_id, symbol="" if which in (None, "") else _symbol(which))
    if op == "md_subscribe":
        return Command(op, cmd_id, symbol=_symbol(obj["symbol"]), value=str(_depth(obj.get("depth", 0))))
    if op == "md_unsubscribe":
        return Command(op, cmd_id, symbol=_symbol(obj["symbol"]))
    if op == "stp":
        mode = obj["mode"]
        if not isinstance(mode, str) or mode not in STP_MODES:
            raise CommandError(f"mode must be one of {', '.join(STP_MODES)}, not {_short(mode)}")
        return Command(op, cmd_id, value=str(STP_MODES[mode]))
    if op == "logon" and "version" in obj:  # none: FIX 4.4
        version = obj["version"]
        if not isinstance(version, str) or version not in FIX_VERSIONS:
            raise CommandError(f"version must be one of {', '.join(FIX_VERSIONS)}, not {_short(version)}")
        return Command(op, cmd_id, value=version)
    if op == "resume":
        lab_id, token, last_n = obj["lab_id"], obj["token"], obj.get("last_n", 0)
        if not (isinstance(lab_id, str) and _HEX.match(lab_id) and isinstance(token, str)
                and _HEX.match(token)):
            raise CommandError("resume needs the lab_id and token your page was given")
        if isinstance(last_n, bool) or not isinstance(last_n, int) or not 0 <= last_n < 2**62:
            raise CommandError(f"last_n must be a whole number, not {_short(last_n)}")
        return Command(op, cmd_id, lab_id=lab_id, token=token, last_n=last_n)
    return Command(op, cmd_id)
