"""The books a lab session's own market data rebuilds: W and X seen on its wire, applied in order.

Pure, no I/O. The page shows these beside the matcher's books (the market feed's Depth): a visitor
sees that a subscriber holding the snapshot (W) and every incremental refresh (X) after it holds the
exchange's book. Prices are read as decimals and shown the way the market feed shows them
(``Instrument.to_price``), so equal books look equal.
"""

from __future__ import annotations

from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

from shared.config import Instrument
from shared.fix.wire import Node, ParsedMessage, WireGroup

BID, OFFER = "0", "1"
NEW, CHANGE, DELETE = "0", "1", "2"
NO_MD_ENTRIES = 268

Level = tuple[int, int]  # (qty, orders)


def _entries(tree: list[Node]) -> tuple[dict[int, str], list[dict[int, str]]]:
    """The top-level fields of a message by tag, and the entries of its NoMDEntries group."""
    top: dict[int, str] = {}
    entries: list[dict[int, str]] = []
    for n in tree:
        if isinstance(n, WireGroup):
            if n.count.tag == NO_MD_ENTRIES:
                entries = [{f.tag: f.value for f in e if not isinstance(f, WireGroup) and f.tag is not None}
                           for e in n.entries]
        elif n.tag is not None:
            top.setdefault(n.tag, n.value)
    return top, entries


class MdBooks:
    """Books per symbol, from the W (replaces the book) and X (changes levels) a session received."""

    def __init__(self, instruments: Iterable[Instrument]) -> None:
        self.instruments = {i.symbol: i for i in instruments}
        self.books: dict[str, dict[str, dict[Decimal, Level]]] = {}
        self.requests: dict[str, list[str]] = {}  # MDReqID -> the symbols the session asked for

    def sent(self, p: ParsedMessage) -> list[str]:
        """Note a MarketDataRequest the session sent; the symbols an unsubscribe ends (forgotten)."""
        if p.msg_type != "V":
            return []
        symbols = [f.value for f in p.fields if f.tag == 55]
        req_id = p.get(262) or ""
        if p.get(263) == "2":
            self.requests.pop(req_id, None)
            for symbol in symbols:
                self.forget(symbol)
            return symbols
        self.requests[req_id] = symbols
        return []

    def apply(self, p: ParsedMessage) -> list[str]:
        """Apply a received W or X; the symbols whose book changed (for a Y: that it will not follow)."""
        if p.msg_type == "Y":
            symbols = self.requests.pop(p.get(262) or "", [])
            for symbol in symbols:
                self.forget(symbol)
            return symbols
        if p.msg_type not in ("W", "X"):
            return []
        top, entries = _entries(p.tree)
        if p.msg_type == "W":
            symbol = top.get(55, "")
            if not symbol:
                return []
            book: dict[str, dict[Decimal, Level]] = {BID: {}, OFFER: {}}
            for e in entries:
                side, px = e.get(269), _price(e.get(270, ""))
                if side in book and px is not None:
                    book[side][px] = (_int(e.get(271)), _int(e.get(346)))
            self.books[symbol] = book
            return [symbol]
        changed: list[str] = []
        for e in entries:
            symbol, side = e.get(55, ""), e.get(269)
            held = self.books.get(symbol)
            px = _price(e.get(270, ""))
            if held is None or side not in (BID, OFFER) or px is None:
                continue  # a trade, or a symbol whose snapshot this session has not seen
            if e.get(279, NEW) == DELETE:
                held[side].pop(px, None)
            else:
                held[side][px] = (_int(e.get(271)), _int(e.get(346)))
            if symbol not in changed:
                changed.append(symbol)
        return changed

    def forget(self, symbol: str) -> None:
        """The session unsubscribed: its book no longer follows the exchange's."""
        self.books.pop(symbol, None)

    def view(self, symbol: str) -> dict[str, Any]:
        """The page's ``md_book`` message: levels ``[price, qty, orders]`` best first, as ``depth``."""
        book = self.books.get(symbol)
        inst = self.instruments.get(symbol)

        def show(px: Decimal) -> str:
            if inst is not None:
                ticks = inst.to_ticks(px)
                if ticks is not None:
                    return str(inst.to_price(ticks))
            return str(px)

        if book is None:
            return {"type": "md_book", "symbol": symbol, "subscribed": False, "bids": [], "asks": []}
        bids = sorted(book[BID].items(), reverse=True)
        asks = sorted(book[OFFER].items())
        return {"type": "md_book", "symbol": symbol, "subscribed": True,
                "bids": [[show(p), q, n] for p, (q, n) in bids],
                "asks": [[show(p), q, n] for p, (q, n) in asks]}


def _price(text: str) -> Decimal | None:
    try:
        px = Decimal(text)
    except InvalidOperation:
        return None
    return px if px.is_finite() else None


def _int(text: str | None) -> int:
    try:
        return int(Decimal(text or "0"))
    except (InvalidOperation, ValueError):
        return 0
