"""Hypothesis state machine on the engine: the book invariants hold after every command.

- never crossed;
- per order: filled + resting + cancelled = its quantity, and every event's cum/leaves agree;
- price-time priority: within a level, orders sit in the order they won their place, and a FIFO
  book fills makers best price first, oldest first, each one fully before the next;
- both sides of a match carry the same match id, price and quantity;
- every event round-trips through the schema codec;
- a snapshot restored at any point carries on exactly;
- IOC and FOK never rest; FOK trades all or nothing;
- no self-trade when prevention is on (each session has its own mode: off, cancel resting, cancel
  aggressor, cancel both), and each order cancelled by it is told why;
- order status answers agree with the model (live: its current state; done: its final state while
  the session's ring holds it, "no longer held" once it cannot; unknown: rejected with a reason);
- a mass cancel reports first, cancels exactly the session's resting orders of its scope, no more;
- a market-data mirror fed with every BookUpdate (and re-seeded by BookImages) is always the book.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from services.matcher.book import NO_ASK, NO_BID, Order
from services.matcher.engine import ST_CANCELED, ST_FILLED, ST_NEW, ST_PARTIAL, ST_REJECTED, Engine, Limits
from shared.config import Instrument
from shared.schema import (
    BUY,
    DAY,
    FOK,
    GTC,
    IOC,
    MASS_CANCEL_ALL,
    MASS_CANCEL_SYMBOL,
    SELL,
    STP_CANCEL_AGGRESSOR,
    STP_CANCEL_BOTH,
    STP_CANCEL_RESTING,
    STP_OFF,
    Accepted,
    Cancelled,
    CancelOrder,
    EndOfDay,
    Filled,
    ImageRequest,
    MassCancel,
    MassCancelReport,
    Message,
    NewOrder,
    Replaced,
    ReplaceOrder,
    SessionEnded,
    StatusReport,
    StatusRequest,
    decode,
    decode_batch,
    encode,
    encode_batch,
)
from tests.unit.test_matcher_market_data import Mirror, book_levels

INSTRUMENTS = [Instrument("ACORN.LAB", 10000, Decimal("0.01")),
               Instrument("BIRCH.LAB", 2500, Decimal("0.01"), pro_rata=True)]
REF = {i.symbol: i.reference_ticks for i in INSTRUMENTS}
PRO_RATA = {i.symbol for i in INSTRUMENTS if i.pro_rata}
SESSIONS = ("A", "B", "C", "D")
STP = {"A": STP_OFF, "B": STP_CANCEL_RESTING, "C": STP_CANCEL_AGGRESSOR, "D": STP_CANCEL_BOTH}
DONE_KEPT = 2  # Limits.done_orders: small, so status answers meet orders no longer held


@dataclass
class Tracked:
    symbol: str
    side: int
    price: int
    qty: int
    filled: int = 0
    cancelled: int = 0
    key: int = 0  # when it won its place in the queue
    session: str = ""
    tif: int = DAY
    clordid: str = ""  # its current ClOrdID
    done_at: int = 0  # the command that ended it (0: not done)


class EngineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.engine = Engine(INSTRUMENTS, limits=Limits(max_open_per_session=8, done_orders=DONE_KEPT),
                             book_updates=True)
        self.mirror = Mirror()
        self.mirror.started = True  # the books start empty: a subscriber from the start needs no image
        self.mirror.books = {symbol: {} for symbol in REF}
        self.commands = 0
        self.seq = dict.fromkeys(SESSIONS, 0)
        self.n = 0
        self.orders: dict[str, Tracked] = {}  # order_id -> model
        self.by_clordid: dict[tuple[str, str], str] = {}  # (session, current ClOrdID) -> order_id
        self.last: Message | None = None
        self.clock = 0
        self.day = 0

    def _stamp(self, session: str) -> tuple[str, int, int]:
        self.seq[session] += 1
        self.n += 1
        self.clock += 1
        return f"c{self.n}", self.seq[session], self.clock

    def _apply(self, cmd: Message) -> list[Message]:
        self.last = cmd
        self.commands += 1
        events = self.engine.apply(cmd)
        assert decode_batch(encode_batch(events)) == events
        self.mirror.take(events)
        maker_fills: list[Filled] = []
        stp_cancels: list[Cancelled] = []
        by_match: dict[str, list[Filled]] = {}
        for ev in events:
            if isinstance(ev, Accepted):
                self.clock += 1
                self.orders[ev.order_id] = Tracked(ev.symbol, ev.side, ev.price, ev.qty, key=self.clock,
                                                   session=ev.session, tif=ev.tif, clordid=ev.clordid)
                self.by_clordid[(ev.session, ev.clordid)] = ev.order_id
            elif isinstance(ev, Replaced):
                t = self.orders[ev.order_id]
                if not (ev.price == t.price and ev.qty <= t.qty):
                    self.clock += 1
                    t.key = self.clock
                t.price, t.qty, t.clordid = ev.price, ev.qty, ev.clordid
                self.by_clordid[(ev.session, ev.clordid)] = ev.order_id
                assert ev.leaves_qty == ev.qty - ev.cum_qty and ev.cum_qty == t.filled
            elif isinstance(ev, Filled):
                t = self.orders[ev.order_id]
                t.filled += ev.last_qty
                assert ev.cum_qty == t.filled and ev.leaves_qty == t.qty - t.filled >= 0
                if not ev.leaves_qty:
                    t.done_at = self.commands
                by_match.setdefault(ev.match_id, []).append(ev)
                if ev.session != getattr(cmd, "session", None) or ev.clordid != getattr(cmd, "clordid", None):
                    maker_fills.append(ev)
            elif isinstance(ev, Cancelled):
                t = self.orders[ev.order_id]
                t.cancelled = t.qty - ev.cum_qty
                t.done_at = self.commands
                assert ev.cum_qty == t.filled
                if isinstance(cmd, MassCancel):
                    assert ev.text == "mass cancel" and ev.session == cmd.session
                if isinstance(cmd, (CancelOrder, SessionEnded, EndOfDay, MassCancel)):
                    continue
                # Cancelled by a new order or a replace: IOC/FOK, or self-trade prevention; it says why.
                if ev.text.startswith("self-trade prevention"):
                    assert STP[ev.session] != STP_OFF, ev
                    stp_cancels.append(ev)
                else:
                    assert t.tif in (IOC, FOK) and ev.text.startswith(("IOC", "FOK")), ev
        for pair in by_match.values():
            assert len(pair) == 2
            a, b = pair
            assert (a.last_px, a.last_qty) == (b.last_px, b.last_qty) and a.side != b.side
            assert a.session != b.session or STP[a.session] == STP_OFF, "self-trade with prevention on"
        self._check_fifo_fills(maker_fills)
        if isinstance(cmd, NewOrder) and cmd.tif in (IOC, FOK):
            order_id = self.by_clordid[(cmd.session, cmd.clordid)]
            t = self.orders[order_id]
            assert order_id not in {o.order_id for b in self.engine.books.values() for o in b.orders()}
            assert t.filled + t.cancelled == t.qty
            if cmd.tif == FOK:
                assert t.filled in (0, t.qty), "FOK traded part of its quantity"
        if stp_cancels:
            mode = STP[getattr(cmd, "session", "")]
            resting = [c for c in stp_cancels if c.clordid != getattr(cmd, "clordid", None)]
            aggressor = [c for c in stp_cancels if c.clordid == getattr(cmd, "clordid", None)]
            assert len(aggressor) <= 1
            assert (not resting) == (mode == STP_CANCEL_AGGRESSOR)
            assert bool(aggressor) == (mode != STP_CANCEL_RESTING)
        return events

    def _check_fifo_fills(self, maker_fills: list[Filled]) -> None:
        fifo = [f for f in maker_fills if f.symbol not in PRO_RATA]
        ranks = []
        for f in fifo:
            price_rank = f.last_px if f.side == SELL else -f.last_px  # best first for the taker
            ranks.append((price_rank, self.orders[f.order_id].key))
        assert ranks == sorted(ranks)
        for f in fifo[:-1]:
            assert f.leaves_qty == 0, "a later maker traded before an earlier one was done"

    # ------------------------------------------------------------------ rules

    @rule(session=st.sampled_from(SESSIONS), symbol=st.sampled_from(sorted(REF)),
          side=st.sampled_from((BUY, SELL)), offset=st.integers(-2, 2), qty=st.integers(1, 40),
          tif=st.sampled_from((DAY, GTC, DAY, GTC, IOC, FOK)))
    def new_order(self, session: str, symbol: str, side: int, offset: int, qty: int, tif: int) -> None:
        cid, seq, ts = self._stamp(session)
        self._apply(NewOrder(session, cid, symbol, side, REF[symbol] + offset, qty, tif, "gw", seq, ts,
                             STP[session]))

    def _open(self) -> list[tuple[str, str]]:
        return sorted((o.session, o.clordid) for b in self.engine.books.values() for o in b.orders())

    @precondition(lambda self: bool(self.by_clordid))
    @rule(data=st.data(), open_only=st.booleans())
    def cancel(self, data: st.DataObject, open_only: bool) -> None:
        keys = (self._open() if open_only else None) or sorted(self.by_clordid)
        (session, orig) = data.draw(st.sampled_from(keys))
        t = self.orders[self.by_clordid[(session, orig)]]
        cid, seq, ts = self._stamp(session)
        self._apply(CancelOrder(session, cid, orig, t.symbol, t.side, "gw", seq, ts))

    @precondition(lambda self: bool(self.by_clordid))
    @rule(data=st.data(), open_only=st.booleans(), offset=st.integers(-3, 3), qty=st.integers(1, 40),
          same_price=st.booleans())
    def replace(self, data: st.DataObject, open_only: bool, offset: int, qty: int, same_price: bool) -> None:
        keys = (self._open() if open_only else None) or sorted(self.by_clordid)
        (session, orig) = data.draw(st.sampled_from(keys))
        t = self.orders[self.by_clordid[(session, orig)]]
        price = t.price if same_price else REF[t.symbol] + offset
        cid, seq, ts = self._stamp(session)
        self._apply(ReplaceOrder(session, cid, orig, t.symbol, t.side, price, qty, "gw", seq, ts))

    @rule(data=st.data(), known=st.sampled_from((True, True, True, False)), by_order_id=st.booleans())
    def status(self, data: st.DataObject, known: bool, by_order_id: bool) -> None:
        keys = sorted(self.by_clordid)
        if known and keys:
            session, asked = data.draw(st.sampled_from(keys))
        else:
            session, asked = data.draw(st.sampled_from(SESSIONS)), "never-used"
        order_id = self.by_clordid.get((session, asked), "")
        cid, seq, ts = self._stamp(session)
        given_id = order_id if by_order_id else ""
        [answer] = self._apply(StatusRequest(session, asked, given_id, "ACORN.LAB", BUY, cid, "gw", seq, ts))
        assert isinstance(answer, StatusReport) and answer.req_id == cid
        if not order_id:
            assert (answer.status, answer.order_id) == (ST_REJECTED, "NONE")
            assert answer.text == "unknown order never-used"
            return
        t = self.orders[order_id]
        final = (t.clordid, order_id, t.price, t.qty, t.filled)
        got = (answer.clordid, answer.order_id, answer.price, answer.qty, answer.cum_qty)
        if not t.done_at:
            assert got == final
            assert answer.status == (ST_PARTIAL if t.filled else ST_NEW)
            assert answer.leaves_qty == t.qty - t.filled
            return
        # Done: held while fewer than DONE_KEPT orders of its session ended after it. Orders that end
        # in the same command may be kept in another order than the events tell (makers, then the
        # taker), so there the model allows either answer.
        ended = [o.done_at for o in self.orders.values() if o.session == session and o.done_at]
        later = sum(1 for d in ended if d > t.done_at)
        same = sum(1 for d in ended if d == t.done_at)
        if answer.status == ST_REJECTED:
            assert answer.order_id == "NONE" and "no longer held" in answer.text
            assert later + same > DONE_KEPT, "a recent done order is no longer held"
        else:
            assert later < DONE_KEPT, "an order that must have left the ring was answered"
            assert got == final and answer.leaves_qty == 0
            assert answer.status == (ST_FILLED if t.filled == t.qty else ST_CANCELED)

    @rule(session=st.sampled_from(SESSIONS), symbol=st.sampled_from(sorted(REF)), one_symbol=st.booleans(),
          side=st.sampled_from((0, BUY, SELL)))
    def mass_cancel(self, session: str, symbol: str, one_symbol: bool, side: int) -> None:
        def in_scope(o: Order) -> bool:
            return (o.session == session and (not one_symbol or o.symbol == symbol)
                    and (not side or o.side == side))

        before = [o.order_id for b in self.engine.books.values() for o in b.orders()]
        scope = {o.order_id for b in self.engine.books.values() for o in b.orders() if in_scope(o)}
        cid, seq, ts = self._stamp(session)
        request_type = MASS_CANCEL_SYMBOL if one_symbol else MASS_CANCEL_ALL
        events = self._apply(MassCancel(session, cid, request_type, symbol if one_symbol else "", side, "gw",
                                        seq, ts))
        head = events[0]
        assert isinstance(head, MassCancelReport) and head.response == request_type
        cancelled = [ev.order_id for ev in events if isinstance(ev, Cancelled)]
        assert head.affected == len(cancelled) and set(cancelled) == scope
        after = [o.order_id for b in self.engine.books.values() for o in b.orders()]
        assert after == [o for o in before if o not in scope]

    @rule()
    def market_image(self) -> None:
        last = self.last
        mirror = Mirror()  # a subscriber arriving now
        mirror.take(self._apply(ImageRequest("gw", self.clock)))
        self.last = last
        assert mirror.books == self.mirror.books

    @rule(session=st.sampled_from(SESSIONS))
    def end_session(self, session: str) -> None:
        _, _, ts = self._stamp(session)
        self._apply(SessionEnded(session, "gw", ts))
        self.by_clordid = {k: v for k, v in self.by_clordid.items() if k[0] != session}

    @rule(same_day=st.booleans())
    def end_of_day(self, same_day: bool) -> None:
        self.day += 0 if same_day and self.day else 1
        self.clock += 1
        before = self.engine.snapshot("0", "0-0", 0)
        self._apply(EndOfDay(self.day, self.clock))
        if self.day == before.end_of_day:
            assert self.engine.snapshot("0", "0-0", 0) == before  # a day ends once
        else:
            assert all(o.tif == GTC for b in self.engine.books.values() for o in b.orders())

    @precondition(lambda self: self.last is not None)
    @rule()
    def redeliver(self) -> None:
        before = self.engine.snapshot("0", "0-0", 0)
        assert self.last is not None
        if isinstance(self.last, SessionEnded):
            return
        assert self.engine.apply(self.last) == []
        assert self.engine.snapshot("0", "0-0", 0) == before

    @rule()
    def snapshot_and_restore(self) -> None:
        # What a restarted matcher does: the restored engine must carry on exactly (queues, ids, ClOrdIDs).
        snap = decode(encode(self.engine.snapshot("0", "1-0", self.clock)))
        restored = Engine.restore(snap, INSTRUMENTS, limits=self.engine.limits,  # type: ignore[arg-type]
                                  book_updates=True)
        assert restored.snapshot("0", "1-0", self.clock) == snap
        self.engine = restored

    # ------------------------------------------------------------------ invariants

    @invariant()
    def market_data_mirror_is_the_book(self) -> None:
        for symbol in REF:
            assert self.mirror.books[symbol] == book_levels(self.engine, symbol)

    @invariant()
    def never_crossed(self) -> None:
        for book in self.engine.books.values():
            assert not book.is_crossed()
            assert (book.best_bid(), book.best_ask()) == (
                max(book.bids, default=None), min(book.asks, default=None))
            assert book.bid_top == (book.best_bid() or NO_BID)
            assert book.ask_top == (book.best_ask() or NO_ASK)

    @invariant()
    def quantities_add_up(self) -> None:
        resting = {o.order_id: o.leaves for b in self.engine.books.values() for o in b.orders()}
        for order_id, t in self.orders.items():
            assert t.filled + resting.get(order_id, 0) + t.cancelled == t.qty, (order_id, t)

    @invariant()
    def time_priority_within_levels(self) -> None:
        for book in self.engine.books.values():
            for side in (BUY, SELL):
                for level in book.levels(side):
                    keys = [self.orders[o.order_id].key for o in level]
                    assert keys == sorted(keys)
                    assert level.qty == sum(o.leaves for o in level)


EngineMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=50, deadline=None,
                                           suppress_health_check=[HealthCheck.too_slow])
TestEngineMachine = EngineMachine.TestCase
