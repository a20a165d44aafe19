"""The engine: validation, fills, cancel, replace, session end, redelivery, snapshots, determinism."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from services.matcher.engine import Engine, Limits, MalformedCommand
from shared.config import Instrument
from shared.schema import (
    BUY,
    CXL_DUPLICATE_CLORDID,
    CXL_OTHER,
    CXL_TOO_LATE,
    CXL_UNKNOWN_ORDER,
    DAY,
    GTC,
    REJ_DUPLICATE_ORDER,
    REJ_INCORRECT_QUANTITY,
    REJ_ORDER_EXCEEDS_LIMIT,
    REJ_OTHER,
    REJ_UNKNOWN_SYMBOL,
    RESPONSE_TO_CANCEL,
    RESPONSE_TO_REPLACE,
    SELL,
    Accepted,
    Cancelled,
    CancelOrder,
    CancelRejected,
    Depth,
    EndOfDay,
    Filled,
    MatcherSnapshot,
    Message,
    NewOrder,
    Rejected,
    Replaced,
    ReplaceOrder,
    SessionEnded,
    Trade,
    as_wire,
    decode,
    decode_batch,
    encode,
    encode_wire_batch,
    from_wire,
)

ACORN = Instrument("ACORN.LAB", 10000, Decimal("0.01"))
BIRCH = Instrument("BIRCH.LAB", 2500, Decimal("0.01"), pro_rata=True)


class Client:
    """Writes commands the way a gateway does: its own MsgSeqNum and ClOrdIDs per session."""

    def __init__(self, session: str, gateway: str = "gw1") -> None:
        self.session = session
        self.gateway = gateway
        self.seq = 0
        self.n = 0

    def _next(self) -> tuple[str, int]:
        self.seq += 1
        self.n += 1
        return f"{self.session}-{self.n}", self.seq

    def new(self, side: int, price: int, qty: int, symbol: str = "ACORN.LAB", tif: int = DAY,
            clordid: str | None = None) -> NewOrder:
        cid, seq = self._next()
        return NewOrder(self.session, clordid or cid, symbol, side, price, qty, tif, self.gateway, seq, seq)

    def cancel(self, orig: str, side: int, symbol: str = "ACORN.LAB") -> CancelOrder:
        cid, seq = self._next()
        return CancelOrder(self.session, cid, orig, symbol, side, self.gateway, seq, seq)

    def replace(self, orig: str, side: int, price: int, qty: int, symbol: str = "ACORN.LAB") -> ReplaceOrder:
        cid, seq = self._next()
        return ReplaceOrder(self.session, cid, orig, symbol, side, price, qty, self.gateway, seq, seq)

    def end(self) -> SessionEnded:
        self.seq += 1
        return SessionEnded(self.session, self.gateway, self.seq)


def engine(**limits: int) -> Engine:
    return Engine([ACORN, BIRCH], limits=Limits(**limits))


def only(events: list[Message], kind: type) -> list:  # type: ignore[type-arg]
    return [e for e in events if isinstance(e, kind)]


# --------------------------------------------------------------------------- accept and trade

def test_an_order_that_does_not_cross_rests() -> None:
    e, a = engine(), Client("A")
    events = e.apply(a.new(BUY, 9990, 5))
    assert events == [
        Accepted("A", "A-1", "1", "ACORN.LAB", BUY, 9990, 5, DAY, "E1", 1),
        Depth("ACORN.LAB", ((9990, 5, 1),), (), 1),
    ]
    assert e.resting_orders == 1


def test_a_crossing_order_trades_at_the_resting_price_and_both_sides_share_the_match_id() -> None:
    e, a, b = engine(), Client("A"), Client("B", "gw2")
    e.apply(a.new(SELL, 10000, 3))
    e.apply(a.new(SELL, 10010, 4))
    events = e.apply(b.new(BUY, 10020, 10))
    fills = only(events, Filled)
    assert [(f.session, f.last_px, f.last_qty, f.cum_qty, f.leaves_qty) for f in fills] == [
        ("B", 10000, 3, 3, 7), ("A", 10000, 3, 3, 0), ("B", 10010, 4, 7, 3), ("A", 10010, 4, 4, 0)]
    assert fills[0].match_id == fills[1].match_id != fills[2].match_id == fills[3].match_id
    # cum_cost gives the average price exactly: (3*100.00 + 4*100.10) / 7
    assert fills[2].cum_cost == 3 * 10000 + 4 * 10010
    assert only(events, Trade) == [Trade("ACORN.LAB", 10000, 3, "M1", BUY, 1),
                                   Trade("ACORN.LAB", 10010, 4, "M2", BUY, 1)]
    # The remainder rests at its own price.
    assert only(events, Depth) == [Depth("ACORN.LAB", ((10020, 3, 1),), (), 1)]
    assert len({ev.exec_id for ev in events if hasattr(ev, "exec_id")}) == 5


def test_events_go_to_each_orders_own_gateway() -> None:
    e, a, b = engine(), Client("A", "gw-a"), Client("B", "gw-b")
    e.apply(a.new(SELL, 10000, 1))
    result = e.apply_batch([b.new(BUY, 10000, 1)])
    assert [(dest, wire[0]) for dest, wire in result.events] == [
        ("gw-b", Accepted.CODE), ("gw-b", Filled.CODE), ("gw-a", Filled.CODE), (None, Trade.CODE),
        (None, Depth.CODE)]


def test_depth_is_one_per_changed_book_per_batch() -> None:
    e, a = engine(), Client("A")
    result = e.apply_batch([a.new(BUY, 9990, 1), a.new(BUY, 9980, 2), a.new(SELL, 2500, 1, "BIRCH.LAB")])
    depths = [m for m in result.messages() if isinstance(m, Depth)]
    assert depths == [Depth("ACORN.LAB", ((9990, 1, 1), (9980, 2, 1)), (), 2),
                      Depth("BIRCH.LAB", (), ((2500, 1, 1),), 3)]


def test_depth_shows_the_best_levels_only() -> None:
    e, a = engine(depth_levels=3), Client("A")
    result = e.apply_batch([a.new(BUY, 9990 - i, 1) for i in range(5)])
    [depth] = [m for m in result.messages() if isinstance(m, Depth)]
    assert [p for p, _, _ in depth.bids] == [9990, 9989, 9988]


# --------------------------------------------------------------------------- validation

@pytest.mark.parametrize(("kwargs", "code", "words"), [
    ({"symbol": "OAK.LAB"}, REJ_UNKNOWN_SYMBOL, "unknown symbol OAK.LAB"),
    ({"qty": 0}, REJ_INCORRECT_QUANTITY, "quantity 0 is outside 1 to 1000"),
    ({"qty": 1001}, REJ_INCORRECT_QUANTITY, "quantity 1001 is outside 1 to 1000"),
    ({"price": 7999}, REJ_OTHER, "price 79.99 is outside 80.00 to 120.00"),
    ({"price": 12001}, REJ_OTHER, "price 120.01 is outside 80.00 to 120.00"),
    ({"price": -5}, REJ_OTHER, "outside 80.00 to 120.00"),
    ({"side": 3}, REJ_OTHER, "side 3 is neither 1 (buy) nor 2 (sell)"),
    ({"tif": 5}, REJ_OTHER, "at the opening (2), IOC (3), FOK (4) or at the close (7)"),
    ({"tif": 2}, REJ_OTHER, "At the Opening orders are taken in the opening call only; ACORN.LAB is"),
    ({"tif": 6}, REJ_OTHER, "time in force 6 is not accepted"),
])
def test_invalid_orders_are_rejected_with_a_reason(kwargs: dict, code: int, words: str) -> None:  # type: ignore[type-arg]
    e, a = engine(), Client("A")
    fields = {"side": BUY, "price": 10000, "qty": 1, "symbol": "ACORN.LAB", "tif": DAY} | kwargs
    events = e.apply(a.new(**fields))
    [rej] = events
    assert isinstance(rej, Rejected)
    assert rej.reason == code and words in rej.text, rej.text
    assert e.resting_orders == 0


def test_band_edges_and_gtc_are_accepted() -> None:
    e, a = engine(), Client("A")
    for price in (8000, 12000):
        [acc, _] = e.apply(a.new(BUY if price == 8000 else SELL, price, 1000, tif=GTC))
        assert isinstance(acc, Accepted)


def test_at_most_twenty_open_orders_per_session() -> None:
    e, a, b = engine(), Client("A"), Client("B")
    for i in range(20):
        assert isinstance(e.apply(a.new(BUY, 9000 + i, 1))[0], Accepted)
    [rej] = e.apply(a.new(BUY, 9500, 1))
    assert isinstance(rej, Rejected) and rej.reason == REJ_ORDER_EXCEEDS_LIMIT
    assert "20 open orders" in rej.text
    assert isinstance(e.apply(b.new(BUY, 8500, 1))[0], Accepted)  # another session is not limited
    # A fill frees a slot.
    e.apply(Client("C").new(SELL, 9019, 1))
    assert isinstance(e.apply(a.new(BUY, 9500, 1))[0], Accepted)


def test_duplicate_clordid_in_a_session_is_rejected_but_not_across_sessions() -> None:
    e, a, b = engine(), Client("A"), Client("B")
    e.apply(a.new(BUY, 9990, 1, clordid="X"))
    [rej] = e.apply(a.new(BUY, 9990, 1, clordid="X"))
    assert isinstance(rej, Rejected) and rej.reason == REJ_DUPLICATE_ORDER
    assert isinstance(e.apply(b.new(BUY, 9990, 1, clordid="X"))[0], Accepted)
    # Even a ClOrdID that was rejected stays used.
    e.apply(a.new(BUY, 1, 1, clordid="Y"))
    [rej] = e.apply(a.new(BUY, 9990, 1, clordid="Y"))
    assert rej.reason == REJ_DUPLICATE_ORDER  # type: ignore[attr-defined]


def test_a_redelivered_command_yields_nothing() -> None:
    e, a, b = engine(), Client("A"), Client("B")
    order = a.new(BUY, 10000, 2)
    first = e.apply(order)
    assert e.apply(order) == []
    cancel = a.cancel(order.clordid, BUY)
    assert isinstance(e.apply(cancel)[0], Cancelled)
    assert e.apply(cancel) == []
    result = e.apply_batch([order, cancel, b.new(SELL, 9000, 1)])
    assert result.redelivered == 2 and len(first) == 2


def test_malformed_commands_raise_and_are_isolated_in_a_batch() -> None:
    e, a = engine(), Client("A")
    bad = NewOrder("A", "c", "ACORN.LAB", BUY, "100.00", 1, DAY, "gw", 1, 1)  # type: ignore[arg-type]
    with pytest.raises(MalformedCommand, match=r"NewOrder.price='100.00' is not an integer"):
        e.apply(bad)
    no_reply = NewOrder("A", "c", "ACORN.LAB", BUY, 10000, 1, DAY, "", 1, 1)
    result = e.apply_batch([bad, a.new(BUY, 9990, 1), no_reply, Trade("X", 1, 1, "M", 1, 1)])
    assert [reason for _, reason in result.malformed] == [
        "NewOrder.price='100.00' is not an integer", "NewOrder.reply_to='' is not a non-empty string",
        "Trade is not a matcher command"]
    assert [type(m) for m in result.messages()] == [Accepted, Depth]


# --------------------------------------------------------------------------- cancel

def test_cancel_an_open_order() -> None:
    e, a = engine(), Client("A")
    order = a.new(BUY, 9990, 5)
    e.apply(order)
    cancel = a.cancel(order.clordid, BUY)
    events = e.apply(cancel)
    assert events == [Cancelled("A", cancel.clordid, order.clordid, "1", "ACORN.LAB", BUY, 9990, 5, 0, 0, "",
                                "E2", cancel.ts), Depth("ACORN.LAB", (), (), cancel.ts)]
    assert e.open_orders("A") == []


def test_cancel_unknown_filled_or_cancelled_is_rejected() -> None:
    e, a, b = engine(), Client("A"), Client("B")
    [rej] = e.apply(a.cancel("nope", BUY))
    assert isinstance(rej, CancelRejected)
    assert (rej.reason, rej.status, rej.order_id, rej.response_to) == (CXL_UNKNOWN_ORDER, 8, "NONE",
                                                                        RESPONSE_TO_CANCEL)
    order = a.new(BUY, 10000, 1)
    e.apply(order)
    e.apply(b.new(SELL, 10000, 1))
    [rej] = e.apply(a.cancel(order.clordid, BUY))
    assert (rej.reason, rej.status) == (CXL_TOO_LATE, 2)  # type: ignore[attr-defined]
    assert "no longer open (filled)" in rej.text  # type: ignore[attr-defined]
    other = a.new(BUY, 9000, 1)
    e.apply(other)
    e.apply(a.cancel(other.clordid, BUY))
    [rej] = e.apply(a.cancel(other.clordid, BUY))
    assert (rej.reason, rej.status) == (CXL_TOO_LATE, 4)  # type: ignore[attr-defined]
    # A cancel request's own ClOrdID names no order.
    request = a.cancel(other.clordid, BUY)
    e.apply(request)
    [rej] = e.apply(a.cancel(request.clordid, BUY))
    assert (rej.reason, rej.status) == (CXL_UNKNOWN_ORDER, 8)  # type: ignore[attr-defined]


def test_cancel_with_wrong_side_or_duplicate_clordid_is_rejected() -> None:
    e, a = engine(), Client("A")
    order = a.new(BUY, 9990, 1)
    e.apply(order)
    [rej] = e.apply(a.cancel(order.clordid, SELL))
    assert (rej.reason, rej.status) == (CXL_OTHER, 0)  # type: ignore[attr-defined]
    dup = CancelOrder("A", order.clordid, order.clordid, "ACORN.LAB", BUY, "gw1", 99, 99)
    [rej] = e.apply(dup)
    assert rej.reason == CXL_DUPLICATE_CLORDID  # type: ignore[attr-defined]
    assert len(e.open_orders("A")) == 1


# --------------------------------------------------------------------------- replace

def queue(e: Engine, symbol: str = "ACORN.LAB") -> list[str]:
    return [o.clordid for o in e.books[symbol].orders()]


def test_replace_down_at_the_same_price_keeps_priority() -> None:
    e, a, b = engine(), Client("A"), Client("B")
    first, second = a.new(BUY, 9990, 5), b.new(BUY, 9990, 5)
    e.apply(first)
    e.apply(second)
    rpl = a.replace(first.clordid, BUY, 9990, 3)
    events = e.apply(rpl)
    assert events[0] == Replaced("A", rpl.clordid, first.clordid, "1", "ACORN.LAB", BUY, 9990, 3, 0, 3, 0,
                                 "E3", rpl.ts)
    assert queue(e) == [rpl.clordid, second.clordid]


@pytest.mark.parametrize(("price", "qty"), [(9990, 6), (9980, 5), (9980, 2)])
def test_replace_up_or_to_another_price_goes_to_the_back(price: int, qty: int) -> None:
    e, a, b = engine(), Client("A"), Client("B")
    first = a.new(BUY, 9990, 5)
    e.apply(first)
    e.apply(b.new(BUY, 9980, 5))
    e.apply(b.new(BUY, 9990, 5))
    rpl = a.replace(first.clordid, BUY, price, qty)
    assert isinstance(e.apply(rpl)[0], Replaced)
    orders = [o for o in e.books["ACORN.LAB"].orders() if o.price == price]
    assert orders[-1].clordid == rpl.clordid and len(orders) == 2


def test_replace_into_the_other_side_trades() -> None:
    e, a, b = engine(), Client("A"), Client("B")
    e.apply(b.new(SELL, 10000, 2))
    order = a.new(BUY, 9990, 5)
    e.apply(order)
    events = e.apply(a.replace(order.clordid, BUY, 10000, 5))
    assert [type(ev) for ev in events] == [Replaced, Filled, Filled, Trade, Depth]
    taker = events[1]
    assert (taker.cum_qty, taker.leaves_qty, taker.clordid) == (2, 3, "A-2")  # type: ignore[attr-defined]


def test_replace_keeps_fills_and_rejects_below_filled_or_closed() -> None:
    e, a, b = engine(), Client("A"), Client("B")
    order = a.new(BUY, 10000, 5)
    e.apply(order)
    e.apply(b.new(SELL, 10000, 3))
    [rej] = e.apply(a.replace(order.clordid, BUY, 10000, 3))
    assert isinstance(rej, CancelRejected)
    assert (rej.reason, rej.status, rej.response_to) == (CXL_OTHER, 1, RESPONSE_TO_REPLACE)
    assert "not above the 3 already filled" in rej.text
    rpl = a.replace(order.clordid, BUY, 10000, 4)
    [ev, _] = e.apply(rpl)
    assert (ev.qty, ev.cum_qty, ev.leaves_qty, ev.cum_cost) == (4, 3, 1, 30000)  # type: ignore[attr-defined]
    # The old ClOrdID no longer names an open order; the new one does.
    [rej] = e.apply(a.cancel(order.clordid, BUY))
    assert (rej.reason, rej.status) == (CXL_TOO_LATE, 5)  # type: ignore[attr-defined]
    e.apply(b.new(SELL, 10000, 1))
    [rej] = e.apply(a.replace(rpl.clordid, BUY, 10000, 9))
    assert (rej.reason, rej.status) == (CXL_TOO_LATE, 2)  # type: ignore[attr-defined]


def test_replace_outside_the_band_is_rejected() -> None:
    e, a = engine(), Client("A")
    order = a.new(BUY, 9990, 5)
    e.apply(order)
    [rej] = e.apply(a.replace(order.clordid, BUY, 13000, 5))
    assert "price 130.00 is outside 80.00 to 120.00" in rej.text  # type: ignore[attr-defined]
    [rej] = e.apply(a.replace(order.clordid, BUY, 9990, 0))
    assert "quantity 0" in rej.text  # type: ignore[attr-defined]
    assert queue(e) == [order.clordid]


# --------------------------------------------------------------------------- session end

def test_session_end_cancels_resting_orders_and_forgets_clordids() -> None:
    e, a, b = engine(), Client("A"), Client("B")
    o1, o2 = a.new(BUY, 9990, 5), a.new(SELL, 2600, 2, "BIRCH.LAB")
    e.apply(o1)
    e.apply(o2)
    e.apply(b.new(BUY, 9980, 1))
    events = e.apply(a.end())
    assert [(ev.clordid, ev.orig_clordid, ev.text) for ev in only(events, Cancelled)] == [
        (o1.clordid, o1.clordid, "session ended"), (o2.clordid, o2.clordid, "session ended")]
    assert e.resting_orders == 1 and "A" not in e.sessions
    # The CompID comes back from the pool with fresh ClOrdIDs: the old ones are free again.
    again = Client("A")
    assert isinstance(e.apply(again.new(BUY, 9990, 1, clordid=o1.clordid))[0], Accepted)
    assert e.apply(SessionEnded("nobody", "gw1", 5)) == []


# --------------------------------------------------------------------------- end of day

def test_end_of_day_cancels_resting_day_orders_only_and_once_per_day() -> None:
    e, a, b = engine(), Client("A"), Client("B", "gw2")
    day1, gtc = a.new(BUY, 9990, 5), a.new(BUY, 9980, 5, tif=GTC)
    day2 = b.new(SELL, 2600, 2, "BIRCH.LAB")
    for cmd in (day1, gtc, day2):
        e.apply(cmd)
    result = e.apply_batch([EndOfDay(20240102, 99)])
    assert [(dest, ev.session, ev.clordid, ev.orig_clordid, ev.text, ev.ts)
            for dest, ev in zip((d for d, _ in result.events), result.messages(), strict=True)
            if isinstance(ev, Cancelled)] == [
        ("gw1", "A", day1.clordid, day1.clordid, "end of day", 99),
        ("gw2", "B", day2.clordid, day2.clordid, "end of day", 99)]
    assert only(result.messages(), Depth) == [Depth("ACORN.LAB", ((9980, 5, 1),), (), 99),
                                              Depth("BIRCH.LAB", (), (), 99)]
    assert [o.clordid for o in e.open_orders("A")] == [gtc.clordid] and e.resting_orders == 1
    # The session goes on: its ClOrdIDs are remembered, a cancel of the ended order is too late.
    [rej] = e.apply(a.cancel(day1.clordid, BUY))
    assert isinstance(rej, CancelRejected) and rej.reason == CXL_TOO_LATE and "cancelled" in rej.text
    # The same day again (another gateway, a restart) and an earlier one do nothing; a Day order of
    # the next day rests until that day ends.
    later = a.new(SELL, 10100, 1)
    e.apply(later)
    assert e.apply(EndOfDay(20240102, 100)) == [] and e.apply(EndOfDay(20240101, 101)) == []
    assert e.resting_orders == 2
    assert [ev.clordid for ev in only(e.apply(EndOfDay(20240103, 102)), Cancelled)] == [later.clordid]


def test_end_of_day_survives_a_snapshot_and_is_checked() -> None:
    e, a = engine(), Client("A")
    e.apply(EndOfDay(20240102, 1))
    e.apply(a.new(BUY, 9990, 5))
    snap = decode(encode(e.snapshot("0", "1-0", 7)))
    assert isinstance(snap, MatcherSnapshot) and snap.end_of_day == 20240102
    restored = Engine.restore(snap, [ACORN, BIRCH])
    assert restored.apply(EndOfDay(20240102, 2)) == [] and restored.resting_orders == 1
    # A snapshot written before end of day existed (eight fields) loads as "no day done yet".
    old = from_wire(as_wire(snap)[:9])
    assert isinstance(old, MatcherSnapshot) and old.end_of_day == 0
    assert Engine.restore(old, [ACORN, BIRCH]).end_of_day == 0
    with pytest.raises(MalformedCommand):
        e.apply((EndOfDay.CODE, "20240103", 3))


# --------------------------------------------------------------------------- pro-rata through the engine

def test_pro_rata_instrument_allocates_as_seed_003() -> None:
    e, m, t = engine(), Client("M"), Client("T")
    makers = [m.new(SELL, 2500, q, "BIRCH.LAB") for q in (100, 200, 300)]
    for cmd in makers:
        e.apply(cmd)
    events = e.apply(t.new(BUY, 2500, 500, "BIRCH.LAB"))
    maker_fills = [(f.clordid, f.last_qty) for f in only(events, Filled) if f.session == "M"]
    assert maker_fills == [(makers[0].clordid, 84), (makers[1].clordid, 166), (makers[2].clordid, 250)]
    assert only(events, Depth)[0].asks == ((2500, 100, 3),)


# --------------------------------------------------------------------------- determinism and snapshots

def random_commands(seed: int, n: int) -> list[Message]:
    rnd = random.Random(seed)
    clients = [Client(f"S{i}", f"gw{i % 2}") for i in range(6)]
    live: list[tuple[Client, str, int, str]] = []
    out: list[Message] = []
    for _ in range(n):
        c = rnd.choice(clients)
        roll = rnd.random()
        symbol = rnd.choice(("ACORN.LAB", "BIRCH.LAB"))
        ref = 10000 if symbol == "ACORN.LAB" else 2500
        if roll < 0.6 or not live:
            cmd = c.new(rnd.choice((BUY, SELL)), ref + rnd.randint(-6, 6), rnd.randint(1, 30), symbol)
            live.append((c, cmd.clordid, cmd.side, symbol))
        elif roll < 0.75:
            owner, cid, side, sym = live.pop(rnd.randrange(len(live)))
            out.append(owner.cancel(cid, side, sym))
            continue
        elif roll < 0.9:
            owner, cid, side, sym = live.pop(rnd.randrange(len(live)))
            ref = 10000 if sym == "ACORN.LAB" else 2500
            cmd = owner.replace(cid, side, ref + rnd.randint(-6, 6), rnd.randint(1, 30), sym)
            live.append((owner, cmd.clordid, side, sym))
        elif roll < 0.95:
            cmd = c.end()
            live = [x for x in live if x[0] is not c]
        else:
            cmd = rnd.choice(out) if out else c.end()  # a redelivery
        out.append(cmd)
    return out


def run_encoded(e: Engine, cmds: list[Message], batch: int = 7) -> list[bytes]:
    return [encode_wire_batch(w for _, w in e.apply_batch(cmds[i:i + batch]).events)
            for i in range(0, len(cmds), batch)]


def test_same_commands_give_byte_identical_events() -> None:
    cmds = random_commands(1, 2000)
    first, second = run_encoded(engine(), cmds), run_encoded(engine(), cmds)
    assert first == second
    assert sum(len(b) for b in first) > 50_000  # the stream really traded, not an empty run


def test_commands_in_wire_form_give_the_same_events_as_messages() -> None:
    cmds = random_commands(4, 1500)
    wires = [as_wire(c) for c in cmds]
    assert all(from_wire(w) == c for w, c in zip(wires, cmds, strict=True))
    assert run_encoded(engine(), wires) == run_encoded(engine(), cmds)  # type: ignore[arg-type]


def test_malformed_wire_commands_are_reported_not_applied() -> None:
    e = engine()
    result = e.apply_batch([(1, "A", "c1", "ACORN.LAB", 1, 10000.0, 1, 0, "gw", 1, 1),
                            (1, "A", "c2", "ACORN.LAB", 1, 10000, 1),
                            (3, "A", "c3", "c1", "ACORN.LAB", 1, 10000, 1, "gw", 1, b"ts"),
                            (2, "A", "c4", "c1", "ACORN.LAB", 1, "gw", 2, 2),
                            (77, "x")])
    assert [why for _, why in result.malformed] == [
        "NewOrder.price=10000.0 is not an integer", "NewOrder has 6 fields instead of 13",
        "ReplaceOrder.ts=b'ts' is not an integer", "type code 77 is not a matcher command"]
    [rej] = result.messages()
    assert isinstance(rej, CancelRejected) and rej.reason == CXL_UNKNOWN_ORDER
    assert e.commands == 1


def test_wire_events_encode_exactly_as_the_codec_does() -> None:
    e = engine()
    for i in range(0, 600, 50):
        result = e.apply_batch(random_commands(2, 600)[i:i + 50])
        # A limit order's events leave out the trailing defaults (ord_type, stop_px): the same
        # messages, in fewer bytes.
        assert decode_batch(encode_wire_batch(w for _, w in result.events)) == result.messages()


def test_a_restored_snapshot_continues_exactly_like_the_original() -> None:
    cmds = random_commands(3, 3000)
    original = engine()
    run_encoded(original, cmds[:1700])
    snap = decode(encode(original.snapshot("0", "1-0", 7)))  # through the codec, as in Redis
    restored = Engine.restore(snap, [ACORN, BIRCH])  # type: ignore[arg-type]
    assert restored.resting_orders == original.resting_orders > 0
    assert run_encoded(restored, cmds[1700:]) == run_encoded(original, cmds[1700:])
