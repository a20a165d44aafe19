"""The market-data core: requests, rejects, snapshots, conflated updates, depth windows, trades."""

from __future__ import annotations

import random
from decimal import Decimal

import pytest

from services.gateway.marketdata import MAX_DEPTH, MAX_SUBSCRIPTIONS, MarketData, parse_request
from shared.config import Instrument
from shared.schema import BUY, SELL

SOH = "\x01"
ACORN = Instrument("ACORN.LAB", 10000, Decimal("0.01"), "0")
BIRCH = Instrument("BIRCH.LAB", 2500, Decimal("0.01"), "1")


def v(req_id: str, kind: str = "1", depth: int | str = 0, types: str = "012",
      symbols: tuple[str, ...] = ("ACORN.LAB",), update: str | None = None, extra: str = "") -> str:
    text = f"8=FIX.4.4{SOH}35=V{SOH}49=C{SOH}262={req_id}{SOH}263={kind}{SOH}264={depth}{SOH}"
    if update is not None:
        text += f"265={update}{SOH}"
    text += extra + f"267={len(types)}{SOH}" + "".join(f"269={t}{SOH}" for t in types)
    text += f"146={len(symbols)}{SOH}" + "".join(f"55={s}{SOH}" for s in symbols)
    return text + f"10=000{SOH}"


def pairs(body: str) -> list[tuple[int, str]]:
    return [(int(t), val) for t, _, val in (f.partition("=") for f in body.split(SOH) if f)]


def fields(body: str) -> dict[int, str]:
    return dict(pairs(body))


def groups(body: str, first: int) -> list[dict[int, str]]:
    """The repeating group entries of ``body`` that start with tag ``first``."""
    out: list[dict[int, str]] = []
    for tag, val in pairs(body):
        if tag == first:
            out.append({})
        if out:
            out[-1][tag] = val
    return out


class Client:
    """A subscriber's own book, rebuilt from W and X exactly as a FIX client would."""

    def __init__(self) -> None:
        self.books: dict[str, dict[str, dict[Decimal, tuple[int, int]]]] = {}
        self.trades: list[tuple[str, Decimal, int]] = []
        self.seen: list[str] = []

    def take(self, body: str) -> None:
        f = fields(body)
        self.seen.append(f[35])
        if f[35] == "W":
            sym = f[55]
            book: dict[str, dict[Decimal, tuple[int, int]]] = {"0": {}, "1": {}}
            for e in groups(body, 269):
                if e[269] == "2":
                    self.trades.append((sym, Decimal(e[270]), int(e[271])))
                else:
                    book[e[269]][Decimal(e[270])] = (int(e[271]), int(e[346]))
            self.books[sym] = book
        elif f[35] == "X":
            for e in groups(body, 279):
                sym, px = e[55], Decimal(e[270])
                if e[269] == "2":
                    assert e[279] == "0"
                    self.trades.append((sym, px, int(e[271])))
                    continue
                side = self.books[sym][e[269]]
                if e[279] == "0":
                    assert px not in side, f"new for a level held: {e}"
                    side[px] = (int(e[271]), int(e[346]))
                elif e[279] == "1":
                    assert px in side, f"change for a level not held: {e}"
                    side[px] = (int(e[271]), int(e[346]))
                else:
                    assert e[279] == "2" and px in side, f"delete for a level not held: {e}"
                    del side[px]

    def view(self, sym: str) -> tuple[list[tuple[Decimal, int, int]], list[tuple[Decimal, int, int]]]:
        b = self.books[sym]
        return ([(p, *b["0"][p]) for p in sorted(b["0"], reverse=True)],
                [(p, *b["1"][p]) for p in sorted(b["1"])])


def truth(md: MarketData, sym: str, depth: int = 0
          ) -> tuple[list[tuple[Decimal, int, int]], list[tuple[Decimal, int, int]]]:
    bids, asks = md.book(sym)
    if depth:
        bids, asks = bids[:depth], asks[:depth]
    tick = Decimal("0.01")
    return [(p * tick, q, n) for p, q, n in bids], [(p * tick, q, n) for p, q, n in asks]


def ready_md(**kw: int) -> MarketData:
    md = MarketData([ACORN, BIRCH], **kw)
    assert md.apply_image("ACORN.LAB", ((9990, 10, 2), (9980, 5, 1)), ((10010, 4, 1),)) == []
    md.apply_image("BIRCH.LAB", (), ())
    return md


def deliver(outs: list[tuple[str, str]], clients: dict[str, Client]) -> None:
    for session, body in outs:
        clients.setdefault(session, Client()).take(body)


# ---------------------------------------------------------------- requests and rejects

def test_snapshot_only_answers_w_and_keeps_no_subscription() -> None:
    md = ready_md()
    out = md.request("C1", v("r1", kind="0"))
    assert [s for s, _ in out] == ["C1"]
    body = out[0][1]
    assert pairs(body)[:4] == [(35, "W"), (262, "r1"), (55, "ACORN.LAB"), (268, "3")]
    assert groups(body, 269) == [{269: "0", 270: "99.90", 271: "10", 346: "2"},
                                 {269: "0", 270: "99.80", 271: "5", 346: "1"},
                                 {269: "1", 270: "100.10", 271: "4", 346: "1"}]
    md.apply_update("ACORN.LAB", ((BUY, 9990, 0, 0),))
    assert md.flush() == []
    assert not md.subscribed


@pytest.mark.parametrize(("raw", "reason", "words"), [
    (v("r1", symbols=("NOPE.LAB",)), "0", "unknown symbol NOPE.LAB"),
    (v("r1", symbols=("ACORN.LAB", "NOPE.LAB")), "0", "NOPE.LAB"),
    (v("r1", depth=-1), "5", "MarketDepth"),
    (v("r1", depth=MAX_DEPTH + 1), "5", "MarketDepth"),
    (v("r1", types="06"), "8", "MDEntryType '6'"),
    (v("r1", types=""), "8", "no MDEntryType"),
    (v("r1", update="2"), "6", "MDUpdateType"),
    (v("r1", extra=f"266=N{SOH}"), "7", "aggregated"),
    (v("r1", symbols=()), "0", "Symbol"),
])
def test_requests_the_venue_does_not_offer_get_y(raw: str, reason: str, words: str) -> None:
    md = ready_md()
    out = md.request("C1", raw)
    assert len(out) == 1
    f = fields(out[0][1])
    assert f[35] == "Y" and f[262] == "r1" and f[281] == reason and words in f[58]
    assert not md.subscribed


def test_duplicate_mdreqid_is_rejected_and_the_first_stays() -> None:
    md = ready_md()
    assert fields(md.request("C1", v("r1"))[0][1])[35] == "W"
    f = fields(md.request("C1", v("r1", symbols=("BIRCH.LAB",)))[0][1])
    assert (f[35], f[281]) == ("Y", "1")
    assert fields(md.request("C2", v("r1"))[0][1])[35] == "W"  # another session's ids are its own
    md.apply_update("ACORN.LAB", ((SELL, 10020, 1, 1),))
    assert sorted(s for s, _ in md.flush()) == ["C1", "C2"]


def test_unsubscribe_stops_updates_and_an_unknown_one_gets_y() -> None:
    md = ready_md()
    md.request("C1", v("r1"))
    assert md.request("C1", v("r1", kind="2")) == []
    md.apply_update("ACORN.LAB", ((SELL, 10020, 1, 1),))
    assert md.flush() == []
    f = fields(md.request("C1", v("r1", kind="2"))[0][1])
    assert f[35] == "Y" and f[262] == "r1" and 281 not in f and "r1" in f[58]
    f = fields(md.request("C1", v("zz", kind="2"))[0][1])
    assert f[35] == "Y" and f[262] == "zz"


def test_a_session_cannot_hold_unbounded_subscriptions() -> None:
    md = ready_md()
    for n in range(MAX_SUBSCRIPTIONS):
        assert fields(md.request("C1", v(f"r{n}"))[0][1])[35] == "W"
    f = fields(md.request("C1", v("more"))[0][1])
    assert (f[35], f[281]) == ("Y", "2")


def test_drop_session_ends_its_subscriptions_only() -> None:
    md = ready_md()
    md.request("C1", v("r1"))
    md.request("C2", v("r1"))
    md.drop_session("C1")
    md.apply_update("ACORN.LAB", ((SELL, 10020, 1, 1),))
    assert [s for s, _ in md.flush()] == ["C2"]
    assert fields(md.request("C1", v("r1"))[0][1])[35] == "W"  # its MDReqID is free again


def test_parse_request_reads_the_groups() -> None:
    req = parse_request(v("a", depth=5, types="20", symbols=("ACORN.LAB", "BIRCH.LAB", "ACORN.LAB"),
                          update="0"))
    assert (req.req_id, req.kind, req.depth, req.full_refresh) == ("a", "1", 5, True)
    assert req.types == {"0", "2"} and req.symbols == ("ACORN.LAB", "BIRCH.LAB")


# ---------------------------------------------------------------- waiting for the mirror

def test_requests_before_the_image_are_answered_when_it_arrives() -> None:
    md = MarketData([ACORN, BIRCH])
    assert md.request("C1", v("r1", symbols=("ACORN.LAB", "BIRCH.LAB"))) == []
    assert md.request("C2", v("s1", kind="0")) == []
    md.apply_update("ACORN.LAB", ((BUY, 9990, 7, 1),))  # before the image: not applied
    md.apply_trade("ACORN.LAB", 9990, 1)
    out = md.apply_image("ACORN.LAB", ((9990, 10, 2),), ())
    assert [(s, fields(b)[35]) for s, b in out] == [("C2", "W")]  # C1 waits for BIRCH too
    assert md.book("ACORN.LAB") == (((9990, 10, 2),), ())
    out = md.apply_image("BIRCH.LAB", (), ((2510, 3, 1),))
    assert [(s, fields(b)[35], fields(b)[55]) for s, b in out] == [("C1", "W", "ACORN.LAB"),
                                                                  ("C1", "W", "BIRCH.LAB")]
    assert fields(out[1][1])[268] == "1"
    assert md.flush() == []  # nothing changed since the W


def test_unsubscribing_a_waiting_request_cancels_it() -> None:
    md = MarketData([ACORN])
    md.request("C1", v("r1"))
    assert md.request("C1", v("r1", kind="2")) == []
    assert md.apply_image("ACORN.LAB", (), ()) == []


# ---------------------------------------------------------------- conflation

def test_x_carries_the_net_change_of_each_level_and_every_trade() -> None:
    md = ready_md()
    c = Client()
    deliver(md.request("C1", v("r1")), {"C1": c})
    md.apply_trade("ACORN.LAB", 10010, 4)
    md.apply_update("ACORN.LAB", ((SELL, 10010, 0, 0),))  # the offer traded away...
    md.apply_update("ACORN.LAB", ((SELL, 10010, 2, 1),))  # ...and a new one at the same price
    md.apply_update("ACORN.LAB", ((BUY, 9995, 3, 1),))  # a new bid...
    md.apply_update("ACORN.LAB", ((BUY, 9995, 0, 0),))  # ...gone before the flush: not sent
    md.apply_update("ACORN.LAB", ((BUY, 9980, 0, 0),))
    out = md.flush()
    assert len(out) == 1
    body = out[0][1]
    assert pairs(body)[:3] == [(35, "X"), (262, "r1"), (268, "3")]
    assert groups(body, 279) == [
        {279: "0", 269: "2", 55: "ACORN.LAB", 270: "100.10", 271: "4"},
        {279: "1", 269: "1", 55: "ACORN.LAB", 270: "100.10", 271: "2", 346: "1"},
        {279: "2", 269: "0", 55: "ACORN.LAB", 270: "99.80"},
    ]
    c.take(body)
    assert c.view("ACORN.LAB") == truth(md, "ACORN.LAB")
    assert md.flush() == []


def test_one_x_per_symbol_and_only_the_sides_asked_for() -> None:
    md = ready_md()
    md.request("C1", v("bids", types="0", symbols=("ACORN.LAB", "BIRCH.LAB")))
    md.request("C1", v("trades", types="2"))
    for i in range(50):
        md.apply_update("ACORN.LAB", ((BUY, 9000 + i, 1, 1), (SELL, 11000 + i, 1, 1)))
        md.apply_update("BIRCH.LAB", ((BUY, 2400 + i, 1, 1),))
    out = md.flush()
    assert sorted((fields(b)[262], len(groups(b, 279))) for _, b in out) == [("bids", 50), ("bids", 50)]
    assert all(e[269] == "0" for _, b in out for e in groups(b, 279))
    md.apply_trade("BIRCH.LAB", 2400, 1)
    assert md.flush() == []  # a trade of a symbol "trades" did not ask for
    md.apply_trade("ACORN.LAB", 9049, 1)
    assert [fields(b)[262] for _, b in md.flush()] == ["trades"]


def test_trades_beyond_the_bound_are_summed_per_price() -> None:
    md = ready_md(max_trades=3)
    c = Client()
    deliver(md.request("C1", v("r1", types="2")), {"C1": c})
    for px, qty in [(100, 1), (101, 2), (102, 3), (103, 1), (101, 5), (103, 2), (104, 1)]:
        md.apply_trade("ACORN.LAB", px, qty)
    out = md.flush()
    assert [(e[270], e[271]) for e in groups(out[0][1], 279)] == [
        ("1.00", "1"), ("1.01", "2"), ("1.02", "3"), ("1.03", "3"), ("1.01", "5"), ("1.04", "1")]
    md.apply_trade("ACORN.LAB", 100, 1)
    assert [(e[270], e[271]) for e in groups(md.flush()[0][1], 279)] == [("1.00", "1")]


def test_a_subscriber_joining_between_flushes_gets_only_what_followed_its_w() -> None:
    md = ready_md()
    a, b = Client(), Client()
    clients = {"A": a, "B": b}
    deliver(md.request("A", v("r1")), clients)
    md.apply_update("ACORN.LAB", ((BUY, 9990, 12, 3), (BUY, 9970, 1, 1)))
    md.apply_trade("ACORN.LAB", 10010, 1)
    deliver(md.request("B", v("r1")), clients)  # its W already shows those levels
    md.apply_update("ACORN.LAB", ((BUY, 9970, 0, 0), (SELL, 10050, 1, 1)))
    md.apply_trade("ACORN.LAB", 10010, 2)
    deliver(md.flush(), clients)
    for c in (a, b):
        assert c.view("ACORN.LAB") == truth(md, "ACORN.LAB")
    assert [q for _, _, q in a.trades] == [1, 2]
    assert [q for _, _, q in b.trades] == [2]


def test_full_refresh_subscription_gets_a_w_per_changed_symbol() -> None:
    md = ready_md()
    c = Client()
    deliver(md.request("C1", v("r1", update="0", symbols=("ACORN.LAB", "BIRCH.LAB"))), {"C1": c})
    md.apply_update("ACORN.LAB", ((BUY, 9990, 0, 0),))
    md.apply_trade("ACORN.LAB", 9990, 10)
    out = md.flush()
    assert [fields(b)[35] for _, b in out] == ["W"]
    c.take(out[0][1])
    assert c.view("ACORN.LAB") == truth(md, "ACORN.LAB")
    assert c.trades == [("ACORN.LAB", Decimal("99.90"), 10)]


def test_a_later_image_replaces_the_mirror_and_subscribers_get_the_differences() -> None:
    md = ready_md()
    c = Client()
    deliver(md.request("C1", v("r1")), {"C1": c})
    md.apply_image("ACORN.LAB", ((9990, 10, 2), (9985, 1, 1)), ((10010, 3, 1), (10020, 1, 1)))
    out = md.flush()
    c.take(out[0][1])
    assert c.view("ACORN.LAB") == truth(md, "ACORN.LAB")
    assert len(groups(out[0][1], 279)) == 4  # 99.85 new, 99.80 delete, 100.10 change, 100.20 new


# ---------------------------------------------------------------- depth windows

def test_depth_one_is_the_top_of_book() -> None:
    md = ready_md()
    c = Client()
    deliver(md.request("C1", v("r1", depth=1)), {"C1": c})
    assert c.view("ACORN.LAB") == truth(md, "ACORN.LAB", 1)
    md.apply_update("ACORN.LAB", ((BUY, 9995, 1, 1),))  # a better bid pushes 99.90 out
    out = md.flush()
    assert groups(out[0][1], 279) == [
        {279: "2", 269: "0", 55: "ACORN.LAB", 270: "99.90"},
        {279: "0", 269: "0", 55: "ACORN.LAB", 270: "99.95", 271: "1", 346: "1"}]
    c.take(out[0][1])
    md.apply_update("ACORN.LAB", ((BUY, 9980, 50, 5),))  # below the top: nothing to send
    assert md.flush() == []
    md.apply_update("ACORN.LAB", ((BUY, 9995, 0, 0),))  # 99.90 comes back
    deliver(md.flush(), {"C1": c})
    assert c.view("ACORN.LAB") == truth(md, "ACORN.LAB", 1)


@pytest.mark.parametrize("seed", range(8))
def test_random_books_rebuilt_from_w_and_x_equal_the_mirror(seed: int) -> None:
    rnd = random.Random(seed)
    md = MarketData([ACORN, BIRCH], max_trades=5)
    md.apply_image("ACORN.LAB", (), ())
    md.apply_image("BIRCH.LAB", ((2490, 1, 1),), ())
    clients: dict[str, Client] = {}
    subs: dict[str, tuple[int, bool]] = {}  # session -> (depth, full refresh)
    traded: dict[str, int] = {}
    for step in range(3000):
        r = rnd.random()
        sym = rnd.choice(("ACORN.LAB", "BIRCH.LAB"))
        if r < 0.6:
            ref = 10000 if sym == "ACORN.LAB" else 2500
            side = rnd.choice((BUY, SELL))
            price = ref - rnd.randint(1, 12) if side == BUY else ref + rnd.randint(1, 12)
            qty = rnd.choice((0, 0, rnd.randint(1, 9)))
            md.apply_update(sym, ((side, price, qty, max(1, qty // 3) if qty else 0),))
        elif r < 0.75:
            qty = rnd.randint(1, 4)
            md.apply_trade(sym, 10000, qty)
            for s in subs if sym == "ACORN.LAB" else ():
                traded[s] += qty
        elif r < 0.78 and len(subs) < 6:
            session = f"S{step}"
            depth, full = rnd.choice((0, 0, 1, 3)), rnd.random() < 0.2
            subs[session] = (depth, full)
            traded[session] = 0
            deliver(md.request(session, v("r", depth=depth, symbols=("ACORN.LAB", "BIRCH.LAB"),
                                          update="0" if full else "1")), clients)
        elif r < 0.79 and subs:
            session = rnd.choice(sorted(subs))
            md.drop_session(session)
            del subs[session]
        elif r < 0.80:
            md.apply_image(sym, *md.book(sym))  # another gateway asked: nothing differs
        else:
            deliver(md.flush(), clients)
    deliver(md.flush(), clients)
    for session, (depth, _) in subs.items():
        for sym in ("ACORN.LAB", "BIRCH.LAB"):
            assert clients[session].view(sym) == truth(md, sym, depth), (session, sym)
        assert sum(q for s, _, q in clients[session].trades if s == "ACORN.LAB") == traded[session]
