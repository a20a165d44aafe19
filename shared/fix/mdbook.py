"""The books a lab session's own market data rebuilds: W and X seen on its wire, applied in order.

Pure, no I/O. The page shows these beside the matcher's books (the market feed's Depth): a visitor
sees that a subscriber holding the snapshot (W) and every incremental refresh (X) after it holds the
exchange's book. Prices are read as decimals and shown the way the market feed shows them
(``Instrument.to_price``), so equal books look equal.

The terminal client reads the same messages for a call's indicative uncross too (docs/trading-day.md):
entries of MDEntryType 4 / 5 (Opening / Closing price; FIX 5.0 SP2 says Q, Auction clearing price)
hold the price and the volume it would execute, A (Imbalance) the surplus left at it with
TradeCondition (277) P (more buyers) or Q (more sellers); TradingSessionSubID (625) names the
auction, which FIX 4.2 (no 625, no A) tells by 4 or 5 alone. The exchange sends them only in a call
and deletes them at its uncross, in the same message as the auction's trades (ordinary 269=2
entries: nothing in them says auction). ``ended`` names the symbols whose indicative price the last
message applied took away: those whose trades in that message are the auction's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from shared.config import Instrument
from shared.fix.wire import Node, ParsedMessage, WireGroup

BID, OFFER = "0", "1"
NEW, CHANGE, DELETE = "0", "1", "2"
NO_MD_ENTRIES = 268
# A call's indicative entries: the price (Opening, Closing, Auction clearing price) and the imbalance.
OPENING, CLOSING, CLEARING, IMBALANCE = "4", "5", "Q", "A"
PRICE_TYPES = frozenset((OPENING, CLOSING, CLEARING))
INDICATIVE_TYPES = PRICE_TYPES | {IMBALANCE}
# The auction, by TradingSessionSubID (625) as the exchange sends it, else by the price's MDEntryType.
AUCTION_BY_SUB_ID = {"2": "opening", "4": "closing", "9": "re-opening"}
AUCTION_BY_TYPE = {OPENING: "opening", CLOSING: "closing"}
MORE = {"P": "buyers", "Q": "sellers"}  # TradeCondition (277) of an imbalance: more buyers / sellers

Level = tuple[int, int]  # (qty, orders)
Entry = dict[int, str]  # one MD entry's fields by tag


@dataclass(frozen=True, slots=True)
class Indicative:
    """The uncross a call would give now, as a session's market data tells it."""

    price: str  # shown as the book's prices are
    volume: int  # what would execute at it
    auction: str  # "opening", "closing", "re-opening" (a halt's), "" when not told
    imbalance: int | None  # the surplus left at the price; None: not sent (FIX 4.2 has no Imbalance)
    more: str  # "buyers", "sellers"; "" when balanced or not told


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
        self.calls: dict[str, dict[str, Entry]] = {}  # symbol -> indicative MDEntryType -> its entry
        self.ended: list[str] = []  # symbols whose indicative price the last W or X took away

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
        self.ended = []
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
            before = self.calls.get(symbol, {})
            self.calls[symbol] = {e[269]: e for e in entries if e.get(269) in INDICATIVE_TYPES}
            self._ended(symbol, before)
            return [symbol]
        changed: list[str] = []
        was: dict[str, dict[str, Entry]] = {}
        for e in entries:
            symbol, side = e.get(55, ""), e.get(269)
            held = self.books.get(symbol)
            if held is not None and side in INDICATIVE_TYPES:
                call = self.calls.setdefault(symbol, {})
                was.setdefault(symbol, dict(call))
                if e.get(279, NEW) == DELETE:
                    call.pop(side, None)
                else:
                    call[side] = e
                continue
            px = _price(e.get(270, ""))
            if held is None or side not in (BID, OFFER) or px is None:
                continue  # a trade, or a symbol whose snapshot this session has not seen
            if e.get(279, NEW) == DELETE:
                held[side].pop(px, None)
            else:
                held[side][px] = (_int(e.get(271)), _int(e.get(346)))
            if symbol not in changed:
                changed.append(symbol)
        for symbol, before in was.items():
            self._ended(symbol, before)
        return changed

    def _ended(self, symbol: str, before: dict[str, Entry]) -> None:
        if not PRICE_TYPES.isdisjoint(before) and PRICE_TYPES.isdisjoint(self.calls.get(symbol, {})):
            self.ended.append(symbol)

    def forget(self, symbol: str) -> None:
        """The session unsubscribed: its book no longer follows the exchange's."""
        self.books.pop(symbol, None)
        self.calls.pop(symbol, None)

    def indicative(self, symbol: str) -> Indicative | None:
        """The call's indicative uncross the session holds for ``symbol``; None outside a call or
        when nothing crosses (the exchange sends no entry then)."""
        call = self.calls.get(symbol, {})
        kind = next((t for t in (OPENING, CLOSING, CLEARING) if t in call), None)
        if kind is None:
            return None
        e = call[kind]
        imbalance = call.get(IMBALANCE)
        auction = AUCTION_BY_SUB_ID.get(e.get(625, "")) or AUCTION_BY_TYPE.get(kind, "")
        return Indicative(self._show(symbol, e.get(270, "")), _int(e.get(271)), auction,
                          None if imbalance is None else _int(imbalance.get(271)),
                          "" if imbalance is None else MORE.get(imbalance.get(277, ""), ""))

    def _show(self, symbol: str, text: str) -> str:
        """A price as the market feed shows it (the instrument's ticks), else as received."""
        px = _price(text)
        inst = self.instruments.get(symbol)
        if px is not None and inst is not None:
            ticks = inst.to_ticks(px)
            if ticks is not None:
                return str(inst.to_price(ticks))
        return text

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
