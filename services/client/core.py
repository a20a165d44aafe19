"""What the TUI and the line mode share: commands carried out on a session, and what its wire tells.

``Client`` follows every record the tap saw (``on_record``, any thread): it decodes it once with the
shared wire parser (``shared.fix.wire``, the names the page shows), applies ExecutionReports to the
orders (``shared.fix.orders.LabOrders``, as the lab does) and W/X to the books
(``shared.fix.mdbook.MdBooks``, as the page does), and keeps the fills and the tape. ``execute``
carries out one parsed command and returns the lines to show. Nothing here draws anything.

A subscription (``book SYMBOL``) also asks for a call's indicative uncross, with the MDEntryTypes the
session's dictionary defines: Q (Auction clearing price, FIX 5.0 SP2) or else 4 (Opening price: the
exchange sends 5 in a closing call), and A (Imbalance; FIX 4.2 has none). The book's lines show it
during a call. The trades of an auction are 269=2 entries like any other: the tape marks as the
auction's the trades of the message that takes the call's indicative price away (the exchange sends
the uncross's trades and those deletes in one message, after the SecurityStatus of the new phase),
at the price of its first trade (every auction trade is at the one uncross price).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from services.client.commands import TIF_NAMES, Command, CommandError, help_text
from services.client.session import LOGGED_ON, LOGGED_OUT, ClientSession, Record, SessionError
from shared.clock import now_ns
from shared.fix import orders as lab_orders
from shared.fix.dictionary import Dictionary
from shared.fix.mdbook import CLEARING, IMBALANCE, OPENING, Indicative, MdBooks
from shared.fix.wire import Node, ParsedMessage, WireGroup, field_text, line, parse
from shared.schema import LabCommand, LabOrder

KEEP_MESSAGES = 5000  # decoded wire messages kept for ``show``
KEEP_FILLS = 500
KEEP_TAPE = 200
SIDE_NAMES = {1: "buy", 2: "sell"}
QUIT = "quit"


@dataclass(frozen=True, slots=True)
class Decoded:
    """A record as the screen shows it."""

    rec: Record
    parsed: ParsedMessage
    text: str  # wire.line(): one decoded line


@dataclass(frozen=True, slots=True)
class Fill:
    clordid: str
    symbol: str
    side: str
    last_px: str
    last_qty: str
    cum_qty: str
    leaves_qty: str
    exec_id: str


@dataclass(frozen=True, slots=True)
class Print:
    """One trade on the tape, from a market-data entry with MDEntryType 2 (Trade)."""

    symbol: str
    price: str
    qty: str
    ns: int
    auction: bool = False  # a trade of the uncross that ended a call


# An instrument's phase from a SecurityStatus (35=f): TradingSessionSubID (625) tells the calls apart
# (services/gateway/status.py); FIX 4.2 has no 625, and says any call with 326=5 (Price indication).
PHASE_BY_SESSION_SUB_ID = {"2": "Pre-open call", "3": "Continuous", "4": "Pre-close call", "5": "Closed",
                           "9": "Halted"}
PHASE_BY_TRADING_STATUS = {"17": "Continuous", "3": "Continuous", "2": "Halted", "18": "Closed", "21": "Call",
                           "5": "Call", "20": "unknown symbol"}


@dataclass(frozen=True, slots=True)
class Phase:
    """An instrument's trading phase, as the exchange's last SecurityStatus told it."""

    symbol: str
    label: str
    text: str  # Text (58): why it changed ("news pending", "schedule day")


def phase_of(f: dict[int, str]) -> Phase:
    """The phase a SecurityStatus (35=f), given its fields by tag, tells."""
    status = f.get(326, "")
    label = PHASE_BY_SESSION_SUB_ID.get(f.get(625, "")) or PHASE_BY_TRADING_STATUS.get(status) \
        or f"SecurityTradingStatus {status or '?'}"
    return Phase(f.get(55, ""), label, f.get(58, ""))


def clordid_prefix(now_s: float | None = None) -> str:
    """``T<seconds, base 36>-``: ClOrdIDs of one run differ from the last run's (CLIENT sessions keep
    their orders while the exchange runs)."""
    n = int(time.time() if now_s is None else now_s)
    digits = ""
    while n:
        n, r = divmod(n, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[r] + digits
    return f"T{digits or '0'}-"


class Client:
    """A session's orders, fills, books and tape, followed from its wire; commands carried out."""

    def __init__(self, session: ClientSession, dictionary: Dictionary, *, prefix: str | None = None,
                 on_decoded: Callable[[Decoded], None] | None = None) -> None:
        self.session = session
        self.dictionary = dictionary
        self.orders = lab_orders.LabOrders(prefix if prefix is not None else clordid_prefix(),
                                           session.fix_version)
        self.books = MdBooks(())
        self.fills: deque[Fill] = deque(maxlen=KEEP_FILLS)
        self.tape: deque[Print] = deque(maxlen=KEEP_TAPE)
        self.phases: dict[str, Phase] = {}  # symbol -> its phase, from the SecurityStatus received
        self.messages: dict[int, Decoded] = {}
        self.on_decoded = on_decoded
        self.version = 0  # bumped on every change to orders, fills, books or tape
        self.asked_to_end = False  # the user logged out (and has not logged on again)
        self._lock = threading.Lock()
        self._then: Callable[[Decoded], None] | None = None

    # ------------------------------------------------------------------ the wire

    def decode(self, rec: Record) -> Decoded:
        """Decode a record and apply what it says (orders, fills, books, tape); thread-safe."""
        p = parse(rec.raw, self.dictionary)
        d = Decoded(rec, p, line(p, rec.source, rec.withheld))
        with self._lock:
            self._then = self.on_decoded
            self.messages[rec.n] = d
            if len(self.messages) > KEEP_MESSAGES:
                del self.messages[min(self.messages)]
            if rec.source == "exchange":
                self._received(p, rec.ns)
            elif not rec.withheld and self.books.sent(p):
                self.version += 1
        return d

    def on_record(self, rec: Record) -> None:
        """The session's ``on_record``: decode, then hand on (to the ``on_decoded`` of that moment)."""
        d = self.decode(rec)
        then = self._then
        if then is not None:
            then(d)

    def follow(self, on_decoded: Callable[[Decoded], None]) -> list[Decoded]:
        """Hand every message decoded from now on to ``on_decoded``; return those decoded so far."""
        with self._lock:
            self.on_decoded = on_decoded
            return [self.messages[n] for n in sorted(self.messages)]

    def _received(self, p: ParsedMessage, ns: int) -> None:
        if p.msg_type == "8":
            f = {x.tag: x.value for x in reversed(p.fields) if x.tag is not None}
            self.orders.on_execution_report(f)
            if lab_orders.is_fill(f):
                side = {"1": "buy", "2": "sell"}.get(f.get(54, ""), "?")
                self.fills.append(Fill(f.get(11, ""), f.get(55, ""), side, f.get(31, ""), f.get(32, ""),
                                       f.get(14, ""), f.get(151, ""), f.get(17, "")))
            self.version += 1
        elif p.msg_type == "Y":
            self.orders.on_md_reject({x.tag: x.value for x in p.fields if x.tag is not None})
            self.books.apply(p)
            self.version += 1
        elif p.msg_type in ("W", "X"):
            self.books.apply(p)
            self._tape(p, ns)
            self.version += 1
        elif p.msg_type == "f":
            phase = phase_of({x.tag: x.value for x in p.fields if x.tag is not None})
            if phase.symbol:
                self.phases[phase.symbol] = phase
                self.version += 1

    def _tape(self, p: ParsedMessage, ns: int) -> None:
        symbol = p.get(55) or ""
        uncross: dict[str, str] = {}  # symbol -> the price of its auction's trades in this message
        for node in p.tree:
            if isinstance(node, WireGroup) and node.count.tag == 268:
                for entry in node.entries:
                    e = _flat(entry)
                    if e.get(269) == "2":
                        sym, px = e.get(55, symbol), e.get(270, "")
                        if sym in self.books.ended:
                            uncross.setdefault(sym, px)
                        self.tape.append(Print(sym, px, e.get(271, ""), ns, uncross.get(sym) == px))

    # ------------------------------------------------------------------ views

    def open_orders(self) -> tuple[LabOrder, ...]:
        with self._lock:
            return self.orders.open_orders()

    def book_lines(self, symbol: str, depth: int = 5) -> list[str]:
        with self._lock:
            view = self.books.view(symbol)
            phase = self.phases.get(symbol)
            call = self.books.indicative(symbol)
        said = f" [{phase.label}{': ' + phase.text if phase.text else ''}]" if phase else ""
        if not view["subscribed"]:
            return [f"{symbol}{said}: not subscribed (book {symbol})"]
        out = [f"{symbol}{said}   bid qty (orders)     |  ask qty (orders)"]
        if call is not None:
            out.append(indicative_line(call))
        bids, asks = view["bids"][:depth], view["asks"][:depth]
        for i in range(max(len(bids), len(asks), 1)):
            b = f"{bids[i][1]:>6} ({bids[i][2]}) {bids[i][0]:>9}" if i < len(bids) else " " * 20
            a = f"{asks[i][0]:<9} {asks[i][1]:>6} ({asks[i][2]})" if i < len(asks) else ""
            out.append(f"  {b} | {a}")
        return out

    def subscribed(self) -> list[str]:
        with self._lock:
            return sorted(self.books.books)

    def seq_line(self) -> str:
        sender, target = self.session.seqs()
        x_sender, x_target = self.session.exchange_seqs()
        return (f"client: next to send {sender}, next expected {target} | "
                f"exchange: next to send {x_sender}, next expected {x_target}")

    def order_lines(self) -> list[str]:
        orders = self.open_orders()
        if not orders:
            return ["no open orders"]
        return [f"{o.clordid}  {SIDE_NAMES.get(o.side, o.side)} {o.symbol} {o.qty} @ {o.price}  "
                f"filled {o.cum_qty}, open {o.leaves_qty}  {self.status_name(o.status)}" for o in orders]

    def status_name(self, status: str) -> str:
        """OrdStatus (39) in the page's words (shared.fix.orders.ORD_STATUS), else the dictionary's."""
        return lab_orders.ORD_STATUS.get(status) or self.dictionary.meaning(39, status) or status

    def fill_lines(self) -> list[str]:
        with self._lock:
            fills = list(self.fills)
        if not fills:
            return ["no fills"]
        return [f"{f.clordid}  {f.side} {f.last_qty} {f.symbol} @ {f.last_px}  (filled {f.cum_qty}, "
                f"open {f.leaves_qty}, ExecID {f.exec_id})" for f in fills]

    def detail_lines(self, n: int) -> list[str]:
        """Every field of wire message ``n``, groups indented, as the page's details show them."""
        with self._lock:
            d = self.messages.get(n)
        if d is None:
            raise CommandError(f"no wire message {n} (kept: the last {KEEP_MESSAGES})")
        p = d.parsed
        out = [f"#{n} {'->' if d.rec.source == 'client' else '<-'} {p.msg_name} 35={p.msg_type}"
               + (" [withheld by the tap]" if d.rec.withheld else "")]
        out += _tree_lines(p.tree or list(p.fields), "  ")
        out += [f"  !! {x}" for x in p.problems]
        return out

    # ------------------------------------------------------------------ commands

    def resolve(self, ref: str) -> str:
        """An order's ClOrdID from what was typed: the ClOrdID itself, or the number after the prefix."""
        if ref.isdigit():
            candidate = f"{self.orders.prefix}{ref}"
            if self.orders.known(candidate):
                return candidate
        if self.orders.known(ref):
            return ref
        raise CommandError(f"unknown order {ref!r}: this session never sent it (see orders)")

    def execute(self, cmd: Command) -> list[str]:
        """Carry out one command; the lines to show. Raise CommandError (one line) when it cannot be."""
        v = cmd.verb
        s = self.session
        if v == "help":
            return help_text()
        if v == QUIT:
            return []
        if v == "orders":
            return self.order_lines()
        if v == "fills":
            return self.fill_lines()
        if v == "seq":
            return [self.seq_line()]
        if v == "show":
            return self.detail_lines(cmd.n)
        if v == "drop":
            s.drop_next()
            return ["the tap withholds your next message"]
        if v == "silent":
            s.go_silent()
            return ["silent: the tap withholds everything you send (talk to stop)"]
        if v == "talk":
            s.talk()
            return ["talking: the tap forwards your messages again"]
        if v == "logout":
            self.asked_to_end = True
            s.disconnect()
            return [f"logged out: {s.text}"]
        if v == "logon":
            self.asked_to_end = False
            s.reconnect()
            return ["connecting again"]
        if not s.logged_on:
            raise CommandError(f"cannot {v}: the session is not logged on ({s.text or s.status})")
        with self._lock:
            msg_type, body = self._message(cmd)
        try:
            s.send([(35, msg_type), *body])
        except SessionError as exc:
            raise CommandError(str(exc)) from None
        return []

    def _message(self, cmd: Command) -> tuple[str, list[tuple[int, object]]]:
        ts = now_ns()
        o = self.orders
        try:
            if cmd.verb in ("buy", "sell"):
                value = f"{cmd.kind}:{cmd.stop}" if cmd.stop else cmd.kind
                lc = LabCommand("", "order", symbol=cmd.symbol, side=cmd.side, price=cmd.price, qty=cmd.qty,
                                tif=cmd.tif, value=value)
                return _pair(o.new_order(lc, ts))
            if cmd.verb == "cancel":
                return _pair(o.cancel(LabCommand("", "cancel", orig_clordid=self.resolve(cmd.ref)), ts))
            if cmd.verb == "replace":
                lc = LabCommand("", "replace", orig_clordid=self.resolve(cmd.ref), price=cmd.price,
                                qty=cmd.qty)
                return _pair(o.replace(lc, ts))
            if cmd.verb == "status" and cmd.symbol:
                # SecurityStatusRequest, subscribed: a SecurityStatus now and at every phase change.
                return "e", [(324, f"st-{cmd.symbol}"), (55, cmd.symbol), (263, "1")]
            if cmd.verb == "status":
                return _pair(o.status(LabCommand("", "status", orig_clordid=self.resolve(cmd.ref))))
            if cmd.verb == "book":
                lc = LabCommand("", "md_subscribe", symbol=cmd.symbol, value=str(cmd.n))
                return _pair(o.md_subscribe(lc, self.indicative_types()))
            if cmd.verb == "unbook":
                return _pair(o.md_unsubscribe(LabCommand("", "md_unsubscribe", symbol=cmd.symbol)))
        except lab_orders.CommandError as exc:
            raise CommandError(str(exc)) from None
        raise CommandError(f"unknown command {cmd.verb!r}")

    def indicative_types(self) -> tuple[str, ...]:
        """The MDEntryTypes of a call's indicative uncross this session's dictionary defines: the
        price (Q where defined, else 4) and the imbalance (A), which FIX 4.2 lacks."""
        price = CLEARING if self.dictionary.meaning(269, CLEARING) else OPENING
        return (price, IMBALANCE) if self.dictionary.meaning(269, IMBALANCE) else (price,)

    def describe(self, cmd: Command) -> str:
        """What a sent order command was, for the prompt's echo."""
        if cmd.verb in ("buy", "sell"):
            terms = {"mkt": "at market", "stop": f"stop {cmd.stop}",
                     "stoplimit": f"stop {cmd.stop} limit {cmd.price}"}.get(cmd.kind, f"@ {cmd.price}")
            return f"{cmd.verb} {cmd.qty} {cmd.symbol} {terms} {TIF_NAMES.get(cmd.tif, cmd.tif)}"
        return cmd.verb

    @property
    def logged_on(self) -> bool:
        return self.session.status == LOGGED_ON

    @property
    def lost(self) -> bool:
        """The session ended without the user asking (the exchange logged it out, the connection fell)."""
        return self.session.status == LOGGED_OUT and not self.asked_to_end


def indicative_line(call: Indicative) -> str:
    """A book's line during a call: the uncross it would give now."""
    auction = f" ({call.auction} auction)" if call.auction else ""
    line = f"  indicative{auction}: {call.price} for {call.volume}"
    if call.imbalance is None:  # FIX 4.2: no Imbalance entries
        return line
    if not call.imbalance:
        return line + ", balanced"
    return line + f", imbalance {call.imbalance}" + (f" more {call.more}" if call.more else "")


def _pair(msg: tuple[str, lab_orders.Fields]) -> tuple[str, list[tuple[int, object]]]:
    return msg[0], list(msg[1])


def _flat(entry: list[Node]) -> dict[int, str]:
    return {f.tag: f.value for f in entry if not isinstance(f, WireGroup) and f.tag is not None}


def _tree_lines(nodes: list[Node], indent: str) -> list[str]:
    out: list[str] = []
    for n in nodes:
        if isinstance(n, WireGroup):
            out.append(f"{indent}{field_text(n.count)}")
            for i, entry in enumerate(n.entries, 1):
                out.append(f"{indent}  entry {i} of {len(n.entries)}:")
                out += _tree_lines(entry, indent + "    ")
        else:
            out.append(f"{indent}{field_text(n)}")
    return out

