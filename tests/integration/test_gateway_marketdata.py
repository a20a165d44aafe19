"""FIX market data (V/W/X/Y) over real QuickFIX sessions, to a strict stock FIX 4.4 client.

The subscriber is QuickFIX with the installed FIX44.xml and every validation switch on: a W, X or Y
that fails validation draws a session Reject from it (and never reaches its application), which fails
the test. The book it rebuilds from W + X must equal the matcher's own, taken as a fresh BookImage
from the market stream, after thousands of random orders and cancels from other sessions.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import quickfix as fix
import redis

from shared import streams
from shared.bus import publish
from shared.schema import BookImage, ImageRequest, decode_batch
from tests.gateway_stack import FixClient, Stack, gateway_stack, matcher_available, order
from tests.helpers import eventually
from tests.stock_client import SOH, StockClient, StockSession, stock_sessions

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not matcher_available(), reason="services.matcher is not in this checkout"),
]

TICK = Decimal("0.01")
SYMBOLS = {"ACORN.LAB": 10000, "BIRCH.LAB": 2500}  # reference prices in ticks (the defaults)
Book = tuple[tuple[tuple[int, int, int], ...], tuple[tuple[int, int, int], ...]]


class MDClient(StockClient):
    """A stock client that also keeps the text of every W, X and Y its application received."""

    def __init__(self) -> None:
        super().__init__()
        self.md: list[str] = []

    def fromApp(self, msg: fix.Message, sid: fix.SessionID) -> None:
        super().fromApp(msg, sid)
        try:
            text = msg.toString()
            with self.lock:
                self.md.append(text)
        except Exception as exc:  # an exception escaping a callback would end the test process
            self.errors.append(repr(exc))

    def messages(self) -> list[str]:
        with self.lock:
            return list(self.md)


def md_sessions(workdir: Path, port: int, comps: list[str]) -> contextlib.AbstractContextManager[
        list[StockSession]]:
    """Stock initiators whose applications are MDClients, logged on; stopped on the way out."""
    return stock_sessions(workdir, port, comps, app=MDClient)


def v(req_id: str, kind: int = 1, depth: int = 0, types: str = "012",
      symbols: tuple[str, ...] = ("ACORN.LAB", "BIRCH.LAB"), update: int | None = None
      ) -> list[tuple[int, object]]:
    """The body of a MarketDataRequest, groups in FIX44.xml's order."""
    body: list[tuple[int, object]] = [(262, req_id), (263, kind), (264, depth)]
    if update is not None:
        body.append((265, update))
    body += [(267, len(types)), *((269, t) for t in types)]
    body += [(146, len(symbols)), *((55, s) for s in symbols)]
    return body


def send_v(s: StockSession, body: list[tuple[int, object]]) -> None:
    """Send a MarketDataRequest built with QuickFIX groups (a message parsed from text without a
    dictionary would not keep repeated tags as group entries)."""
    msg = fix.Message()
    msg.getHeader().setField(fix.BeginString("FIX.4.4"))
    msg.getHeader().setField(fix.MsgType("V"))
    for tag, value in body:
        if tag in (267, 146):
            continue  # addGroup counts the entries
        if tag in (269, 55):
            group = fix.Group(267 if tag == 269 else 146, tag)
            group.setField(tag, str(value))
            msg.addGroup(group)
        else:
            msg.setField(tag, str(value))
    s.send_message(msg)


def split(text: str) -> list[tuple[int, str]]:
    return [(int(t), val) for t, _, val in (f.partition("=") for f in text.split(SOH) if f)]


def entries(text: str, first: int) -> list[dict[int, str]]:
    out: list[dict[int, str]] = []
    for tag, val in split(text):
        if tag == 10:  # the trailer
            break
        if tag == first:
            out.append({})
        if out:
            out[-1][tag] = val
    return out


def head(text: str) -> dict[int, str]:
    return dict(split(text))


def ticks(px: str) -> int:
    return int(Decimal(px) / TICK)


class Rebuilt:
    """Books rebuilt from the W and X of one MDReqID, as a FIX client keeps them."""

    def __init__(self, req_id: str) -> None:
        self.req_id = req_id
        self.books: dict[str, dict[str, dict[int, tuple[int, int]]]] = {}
        self.trades: list[tuple[str, int, int]] = []
        self.done = 0

    def feed(self, texts: list[str]) -> None:
        for text in texts[self.done:]:
            self.done += 1
            h = head(text)
            if h.get(262) != self.req_id:
                continue
            if h[35] == "W":
                book: dict[str, dict[int, tuple[int, int]]] = {"0": {}, "1": {}}
                for e in entries(text, 269):
                    if e[269] == "2":
                        self.trades.append((h[55], ticks(e[270]), int(e[271])))
                    else:
                        book[e[269]][ticks(e[270])] = (int(e[271]), int(e[346]))
                self.books[h[55]] = book
            elif h[35] == "X":
                for e in entries(text, 279):
                    px = ticks(e[270])
                    if e[269] == "2":
                        assert e[279] == "0", e
                        self.trades.append((e[55], px, int(e[271])))
                        continue
                    side = self.books[e[55]][e[269]]
                    if e[279] == "2":
                        assert px in side, f"delete of a level not held: {e}"
                        del side[px]
                    else:
                        assert (px in side) == (e[279] == "1"), f"new/change does not match: {e}"
                        side[px] = (int(e[271]), int(e[346]))

    def book(self, symbol: str, depth: int = 0) -> Book:
        b = self.books[symbol]
        bids = tuple((p, *b["0"][p]) for p in sorted(b["0"], reverse=True))
        asks = tuple((p, *b["1"][p]) for p in sorted(b["1"]))
        return (bids[:depth], asks[:depth]) if depth else (bids, asks)


def matcher_books(redis_url: str) -> dict[str, Book]:
    """The matcher's own books now: a fresh BookImage of each, read from shard 0's market stream."""
    r = redis.Redis.from_url(redis_url)
    newest: Any = r.xrevrange(streams.shard_market_stream("0"), count=1)
    last = newest[0][0] if newest else b"0-0"
    publish(r, streams.orders_stream("0"), [ImageRequest("test", time.time_ns())], 100_000)
    books: dict[str, Book] = {}
    deadline = time.monotonic() + 10
    while len(books) < len(SYMBOLS):
        assert time.monotonic() < deadline, f"no BookImage of every book (have {sorted(books)})"
        got: Any = r.xread({streams.shard_market_stream("0"): last}, block=500)
        for _id, fields in got[0][1] if got else ():
            last = _id
            for msg in decode_batch(fields[streams.BATCH_FIELD]):
                if isinstance(msg, BookImage) and msg.symbol in SYMBOLS:
                    books[msg.symbol] = (tuple(msg.bids), tuple(msg.asks))
    r.close()
    return books


def trade_randomly(clients: list[FixClient], orders: int, seed: int) -> None:
    """Random limit orders (a tenth IOC) and cancels from plain-socket sessions, ten at a time per
    session, each answered (ExecutionReport or OrderCancelReject) before its next ten. (Their
    orders rest until they log out: CancelOnDisconnect.)"""
    rnd = random.Random(seed)
    sent = 0
    placed: dict[str, list[tuple[str, str, int]]] = {c.comp_id: [] for c in clients}
    while sent < orders:
        for c in clients:
            waiting: set[str] = set()
            for _ in range(10):
                sent += 1
                cid = f"{c.comp_id}-{sent}"
                if placed[c.comp_id] and rnd.random() < 0.25:
                    orig, sym, side = rnd.choice(placed[c.comp_id])
                    c.send("F", [(41, orig), (11, cid), (55, sym), (54, side),
                                 (60, time.strftime("%Y%m%d-%H:%M:%S", time.gmtime()))])
                else:
                    sym = rnd.choice(list(SYMBOLS))
                    side = rnd.choice((1, 2))
                    px = SYMBOLS[sym] + (rnd.randint(-8, 3) if side == 1 else rnd.randint(-3, 8))
                    tif = 3 if rnd.random() < 0.1 else 0
                    c.send("D", order(cid, side, rnd.randint(1, 9), str(px * TICK), sym, tif=tif))
                    placed[c.comp_id].append((cid, sym, side))
                waiting.add(cid)
            while waiting:
                msg = c.read_message()
                assert msg is not None, f"{c.comp_id} closed"
                if msg.get(35) in ("8", "9"):
                    waiting.discard(msg.get(11, ""))


@pytest.fixture
def stack() -> Iterator[Stack]:
    with gateway_stack(None) as s:
        yield s


def test_books_rebuilt_from_w_and_x_equal_the_matchers_after_random_trading(stack: Stack,
                                                                            tmp_path: Path) -> None:
    with md_sessions(tmp_path, stack.fix_port, ["CLIENT01"]) as (sub,):
        c = sub.client
        assert isinstance(c, MDClient)
        full, top = Rebuilt("full"), Rebuilt("top")
        send_v(sub, v("full"))
        send_v(sub, v("top", depth=1, types="01"))
        eventually(lambda: sum(head(t)[35] == "W" for t in c.messages()) == 4, what="4 snapshots")
        with contextlib.ExitStack() as traders:
            clients = [traders.enter_context(FixClient(stack.fix_port, f"CLIENT{n:02d}"))
                       for n in range(2, 8)]
            trade_randomly(clients, 3000, seed=14)
            truth = matcher_books(stack.redis_url)
            assert any(truth[s][0] and truth[s][1] for s in SYMBOLS), "the books ended empty: a weak test"

            def agrees() -> bool:
                msgs = c.messages()
                full.feed(msgs)
                top.feed(msgs)
                for s in SYMBOLS:
                    assert full.book(s) == truth[s], (s, "full depth", full.book(s), truth[s])
                    assert top.book(s) == (truth[s][0][:1], truth[s][1][:1]), (s, "top", top.book(s))
                return True

            eventually(agrees, timeout=15, what="the rebuilt books equal the matcher's")
        # The traders logged out: every resting order was theirs and is cancelled (SessionEnded); the
        # books the subscriber holds follow the matcher's to empty.
        empty: Book = ((), ())

        def emptied() -> dict[str, Book] | None:
            books = matcher_books(stack.redis_url)
            return books if all(books[s] == empty for s in SYMBOLS) else None

        truth = eventually(emptied, timeout=15, what="the matcher's books empty after the logouts")
        eventually(agrees, timeout=15, what="the rebuilt books equal the matcher's after the logouts")
        types = [head(t)[35] for t in c.messages()]
        assert types.count("X") > 10 and "Y" not in types
        assert full.trades, "no trade reached the subscriber"
        assert not c.session_rejects(), c.session_rejects()
        assert not c.errors


def test_snapshot_unsubscribe_each_reject_and_a_logout(stack: Stack, tmp_path: Path) -> None:
    with FixClient(stack.fix_port, "CLIENT02") as trader:
        def rest(cid: str, side: int, qty: int, px: str) -> None:
            trader.send("D", order(cid, side, qty, px))
            trader.expect("8", lambda m: m.get(11) == cid and m.get(150) == "0")

        rest("b1", 1, 5, "99.50")
        with md_sessions(tmp_path, stack.fix_port, ["CLIENT01"]) as (sub,):
            c = sub.client
            assert isinstance(c, MDClient)

            def answer(req_id: str, msg_type: str, n: int = 1) -> list[str]:
                def got() -> list[str] | None:
                    found = [t for t in c.messages()
                             if head(t).get(262) == req_id and head(t)[35] == msg_type]
                    return found if len(found) >= n else None
                return eventually(got, what=f"{n} 35={msg_type} for {req_id}")

            # Snapshot only: one W per symbol (an empty book is a W with no entries), nothing after.
            send_v(sub, v("snap", kind=0))
            snaps = answer("snap", "W", 2)
            by_symbol = {head(t)[55]: t for t in snaps}
            assert entries(by_symbol["ACORN.LAB"], 269) == [{269: "0", 270: "99.50", 271: "5", 346: "1"}]
            assert head(by_symbol["BIRCH.LAB"])[268] == "0"

            # Subscribe, see a change as X, unsubscribe: no X for it after.
            send_v(sub, v("live", symbols=("ACORN.LAB",), types="01"))
            answer("live", "W")
            rest("b2", 1, 2, "99.60")
            x = answer("live", "X")[0]
            assert entries(x, 279) == [{279: "0", 269: "0", 55: "ACORN.LAB", 270: "99.60", 271: "2",
                                        346: "1"}]
            send_v(sub, v("live", kind=2, symbols=("ACORN.LAB",), types="01"))
            send_v(sub, v("next", symbols=("ACORN.LAB",), types="01"))
            answer("next", "W")
            live_x = len(answer("live", "X"))
            rest("b3", 1, 1, "99.70")
            answer("next", "X")
            assert len(answer("live", "X")) == live_x
            assert not [t for t in c.messages() if head(t).get(262) == "snap" and head(t)[35] != "W"]

            # Every MarketDataRequestReject case.
            cases = [("unknown", v("unknown", symbols=("NOPE.LAB",)), "0"),
                     ("next", v("next"), "1"),
                     ("deep", v("deep", depth=101), "5"),
                     ("settle", v("settle", types="06"), "8"),
                     ("gone", v("gone", kind=2), None)]
            for _req_id, body, _ in cases:
                send_v(sub, body)
            for req_id, _, reason in cases:
                y = head(answer(req_id, "Y")[0])
                assert y.get(281) == reason and y[58], y
            assert not c.session_rejects(), c.session_rejects()
            assert not c.errors

        # A logout ends the session's subscriptions: on its next logon, MDReqID "next" is free again.
        with md_sessions(tmp_path, stack.fix_port, ["CLIENT01"]) as (again,):
            c2 = again.client
            assert isinstance(c2, MDClient)
            send_v(again, v("next", symbols=("ACORN.LAB",)))
            w = eventually(lambda: next((t for t in c2.messages() if head(t).get(262) == "next"), None),
                           what="an answer to 'next'")
            assert head(w)[35] == "W"
            assert not c2.session_rejects()
