"""The client's commands as typed at its prompt (seed 000's fixcli verbs and a few more): pure.

``parse(text)`` turns one line into a ``Command`` or raises ``CommandError`` whose text is one clear
line. Values are checked only for shape here (a price is a decimal, a quantity a whole number): what
the exchange accepts is the exchange's to say, in its own ExecutionReport.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from shared.schema import AT_CLOSE, AT_OPEN, BUY, DAY, FOK, GTC, IOC, SELL

TIF_WORDS = {"day": DAY, "0": DAY, "gtc": GTC, "1": GTC, "ioc": IOC, "3": IOC, "fok": FOK, "4": FOK,
             "opg": AT_OPEN, "2": AT_OPEN, "atc": AT_CLOSE, "7": AT_CLOSE}
TIF_NAMES = {DAY: "Day", GTC: "GTC", IOC: "IOC", FOK: "FOK", AT_OPEN: "At the Opening",
             AT_CLOSE: "At the Close"}
# Order types after the symbol: how many prices each takes before the quantity.
KINDS = {"mkt": 0, "stop": 1, "stoplimit": 2}

# verb: (arguments, what it does); the order is help's.
HELP: dict[str, tuple[str, str]] = {
    "buy": ("SYMBOL [mkt|stop STOP|stoplimit STOP] PRICE QTY [day|gtc|ioc|fok|opg|atc]",
            "send a NewOrderSingle (35=D), Side 1: limit, or market (no PRICE), stop (no PRICE), stop limit"),
    "sell": ("SYMBOL [mkt|stop STOP|stoplimit STOP] PRICE QTY [day|gtc|ioc|fok|opg|atc]",
             "send a NewOrderSingle (35=D), Side 2 (e.g. sell ACORN.LAB stop 98.50 10)"),
    "cancel": ("ID", "OrderCancelRequest (35=F) for one of your orders (its ClOrdID or the number after -)"),
    "replace": ("ID PRICE QTY", "OrderCancelReplaceRequest (35=G): new price and quantity (- keeps one)"),
    "status": ("ID|SYMBOL", "OrderStatusRequest (35=H) for one of your orders; for a symbol (it has a '.'), "
               "SecurityStatusRequest (35=e): its phase now and at each change"),
    "orders": ("", "your open orders"),
    "fills": ("", "your fills"),
    "book": ("SYMBOL [DEPTH]", "subscribe to its market data (35=V): the book and tape from W and X"),
    "unbook": ("SYMBOL", "end that subscription (35=V, 263=2)"),
    "seq": ("", "both ends' next sequence numbers"),
    "drop": ("", "the tap withholds your next message: the exchange sees a gap and asks for it again"),
    "silent": ("", "the tap withholds everything you send: the exchange tests you, then logs you out"),
    "talk": ("", "forward your messages again"),
    "show": ("N", "every field of wire message N"),
    "logout": ("", "send a Logout and end the session"),
    "logon": ("", "log on again (a new connection)"),
    "help": ("", "this list"),
    "quit": ("", "log out and leave"),
}
ALIASES = {"exit": "quit", "q": "quit", "?": "help", "b": "buy", "s": "sell", "c": "cancel",
           "go-silent": "silent", "drop-next": "drop", "talk-again": "talk", "reconnect": "logon",
           "subscribe": "book", "unsubscribe": "unbook"}


class CommandError(ValueError):
    """A line that is not a command the client knows, or not in its shape (the text says why)."""


@dataclass(frozen=True, slots=True)
class Command:
    """One parsed command. ``ref`` names an order (ClOrdID or its number); price "" keeps it."""

    verb: str
    symbol: str = ""
    side: int = 0
    price: str = ""
    qty: int = 0
    tif: int = DAY
    ref: str = ""
    kind: str = ""  # "" limit, "mkt", "stop", "stoplimit"
    stop: str = ""  # StopPx (99) of a stop or stop limit
    n: int = 0  # show's message number; book's MarketDepth


def help_text() -> list[str]:
    width = max(len(f"{v} {a}") for v, (a, _) in HELP.items())
    return [f"{(v + ' ' + a).strip():<{width}}  {what}" for v, (a, what) in HELP.items()]


def _price(text: str) -> str:
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise CommandError(f"price {text!r} is not a number (e.g. 99.90)") from None
    if not value.is_finite() or value <= 0:
        raise CommandError(f"price {text!r} is not a positive number")
    return text


def _qty(text: str) -> int:
    if not text.isdigit() or int(text) <= 0:
        raise CommandError(f"quantity {text!r} is not a whole number above 0")
    return int(text)


def _usage(verb: str) -> str:
    args = HELP[verb][0]
    return f"usage: {verb} {args}".rstrip()


def parse(text: str) -> Command | None:
    """The command on one line; None for an empty line. Raise CommandError (one line) when bad."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise CommandError(f"cannot read {text!r}: {exc}") from None
    if not words:
        return None
    verb = ALIASES.get(words[0].lower(), words[0].lower())
    args = words[1:]
    if verb not in HELP:
        raise CommandError(f"unknown command {words[0]!r}: type help for the list")
    if verb in ("buy", "sell"):
        kind = args[1].lower() if len(args) > 1 and args[1].lower() in KINDS else ""
        # limit: SYMBOL PRICE QTY; mkt: SYMBOL mkt QTY; stop: SYMBOL stop STOP QTY;
        # stoplimit: SYMBOL stoplimit STOP PRICE QTY; each with an optional TimeInForce.
        need = 3 if not kind else 3 + KINDS[kind]
        if len(args) not in (need, need + 1):
            raise CommandError(_usage(verb))
        tif = DAY
        if len(args) == need + 1:
            if args[need].lower() not in TIF_WORDS:
                raise CommandError(f"TimeInForce {args[need]!r} is none of day, gtc, ioc, fok, opg, atc")
            tif = TIF_WORDS[args[need].lower()]
        stop = _price(args[2]) if kind in ("stop", "stoplimit") else ""
        price = (_price(args[1]) if not kind else _price(args[3]) if kind == "stoplimit" else "")
        return Command(verb, symbol=args[0].upper(), side=BUY if verb == "buy" else SELL,
                       price=price, qty=_qty(args[need - 1]), tif=tif, kind=kind, stop=stop)
    if verb in ("cancel", "status"):
        if len(args) != 1:
            raise CommandError(_usage(verb))
        if verb == "status" and "." in args[0]:  # a symbol (ACORN.LAB): ClOrdIDs here have no '.'
            return Command(verb, symbol=args[0].upper())
        return Command(verb, ref=args[0])
    if verb == "replace":
        if len(args) != 3:
            raise CommandError(_usage(verb))
        price = "" if args[1] == "-" else _price(args[1])
        qty = 0 if args[2] == "-" else _qty(args[2])
        if not price and not qty:
            raise CommandError("replace changes the price, the quantity or both: not - -")
        return Command(verb, ref=args[0], price=price, qty=qty)
    if verb == "book":
        if len(args) not in (1, 2):
            raise CommandError(_usage(verb))
        depth = 0
        if len(args) == 2:
            if not args[1].isdigit():
                raise CommandError(f"depth {args[1]!r} is not a whole number (0: the whole book)")
            depth = int(args[1])
        return Command(verb, symbol=args[0].upper(), n=depth)
    if verb == "unbook":
        if len(args) != 1:
            raise CommandError(_usage(verb))
        return Command(verb, symbol=args[0].upper())
    if verb == "show":
        if len(args) != 1 or not args[0].isdigit():
            raise CommandError(_usage(verb))
        return Command(verb, n=int(args[0]))
    if args:
        raise CommandError(f"{verb} takes no arguments")
    return Command(verb)
