"""The engine's order status (StatusRequest -> StatusReport) and mass cancel (MassCancel ->
MassCancelReport, then a Cancelled per order): lookups, final states, bounds, bad requests."""

from __future__ import annotations

from dataclasses import replace

import pytest

from services.matcher.engine import (
    MASS_REJ_OTHER,
    MASS_REJ_UNKNOWN_SECURITY,
    Engine,
    Limits,
    MalformedCommand,
)
from shared.schema import (
    BUY,
    IOC,
    MASS_CANCEL_ALL,
    MASS_CANCEL_SYMBOL,
    SELL,
    Cancelled,
    ImageRequest,
    MassCancel,
    MassCancelReport,
    Message,
    StatusReport,
    StatusRequest,
    decode,
    encode,
)
from tests.unit.test_matcher_engine import ACORN, BIRCH, Client, engine


class Asker(Client):
    """A client that also asks for order status and mass cancels, as the gateway writes them."""

    def status(self, clordid: str, order_id: str = "", symbol: str = "ACORN.LAB", side: int = BUY,
               req_id: str = "") -> StatusRequest:
        self.seq += 1
        return StatusRequest(self.session, clordid, order_id, symbol, side, req_id, self.gateway, self.seq,
                             self.seq)

    def mass(self, request_type: int = MASS_CANCEL_ALL, symbol: str = "", side: int = 0,
             clordid: str | None = None) -> MassCancel:
        cid, seq = self._next()
        return MassCancel(self.session, clordid or cid, request_type, symbol, side, self.gateway, seq, seq)


def report(events: list[Message]) -> StatusReport:
    [only] = events
    assert isinstance(only, StatusReport)
    return only


def state(r: StatusReport) -> tuple[str, str, int, int, int, int, int, int]:
    return (r.clordid, r.order_id, r.price, r.qty, r.cum_qty, r.leaves_qty, r.cum_cost, r.status)


def resting(e: Engine) -> list[tuple[str, str]]:
    return [(o.session, o.clordid) for b in e.books.values() for o in b.orders()]


# --------------------------------------------------------------------------- status: live orders

def test_status_of_a_live_order_new_then_partially_filled() -> None:
    e, a, b = engine(), Asker("A"), Asker("B")
    e.apply(a.new(BUY, 9990, 5))
    r = report(e.apply(a.status("A-1", req_id="q1")))
    assert state(r) == ("A-1", "1", 9990, 5, 0, 5, 0, 0)
    assert (r.session, r.symbol, r.side, r.text, r.req_id, r.exec_id, r.ts) == (
        "A", "ACORN.LAB", BUY, "", "q1", "E2", a.seq)
    e.apply(b.new(SELL, 9990, 2))
    assert state(report(e.apply(a.status("A-1")))) == ("A-1", "1", 9990, 5, 2, 3, 2 * 9990, 1)


def test_status_by_any_clordid_of_a_replaced_order_gives_its_current_state() -> None:
    e, a = engine(), Asker("A")
    e.apply(a.new(BUY, 9990, 5))
    e.apply(a.replace("A-1", BUY, 9991, 6))
    e.apply(a.replace("A-2", BUY, 9992, 7))
    for asked in ("A-1", "A-2", "A-3"):
        assert state(report(e.apply(a.status(asked)))) == ("A-3", "1", 9992, 7, 0, 7, 0, 0)


def test_status_by_order_id() -> None:
    e, a = engine(), Asker("A")
    e.apply(a.new(BUY, 9990, 5))
    e.apply(a.new(BUY, 9980, 4))
    # Found by ClOrdID and the OrderID agrees; found by OrderID alone (a ClOrdID never used).
    assert state(report(e.apply(a.status("A-2", order_id="2"))))[:2] == ("A-2", "2")
    assert state(report(e.apply(a.status("nope", order_id="1"))))[:2] == ("A-1", "1")
    # They disagree: no answer about either order.
    r = report(e.apply(a.status("A-2", order_id="1")))
    assert (r.status, r.order_id, r.text) == (8, "NONE", "order A-2 has OrderID 2, not 1")


def test_another_sessions_order_is_unknown() -> None:
    e, a, b = engine(), Asker("A"), Asker("B")
    e.apply(a.new(BUY, 9990, 5))
    r = report(e.apply(b.status("A-1", order_id="1", req_id="x")))
    assert (r.clordid, r.order_id, r.status, r.req_id) == ("A-1", "NONE", 8, "x")
    assert r.text == "unknown order A-1 (OrderID 1)"


# --------------------------------------------------------------------------- status: done orders

def test_status_of_done_orders_gives_their_final_state() -> None:
    e, a, b = engine(), Asker("A"), Asker("B")
    e.apply(a.new(SELL, 10000, 3))  # filled by B-1 (a maker)
    e.apply(b.new(BUY, 10000, 3))  # B-1: filled at once (a taker)
    e.apply(a.new(SELL, 10010, 4))  # cancelled after a partial fill
    e.apply(b.new(BUY, 10010, 1))
    e.apply(a.cancel("A-2", SELL))
    e.apply(a.new(SELL, 10020, 2, tif=IOC))  # IOC, nothing to trade
    e.apply(a.new(SELL, 99999, 2))  # rejected (outside the band)
    assert state(report(e.apply(a.status("A-1", side=SELL)))) == ("A-1", "1", 10000, 3, 3, 0, 30000, 2)
    assert state(report(e.apply(b.status("B-1")))) == ("B-1", "2", 10000, 3, 3, 0, 30000, 2)
    assert state(report(e.apply(a.status("A-2", side=SELL)))) == ("A-2", "3", 10010, 4, 1, 0, 10010, 4)
    assert state(report(e.apply(a.status("A-4", side=SELL)))) == ("A-4", "5", 10020, 2, 0, 0, 0, 4)
    r = report(e.apply(a.status("A-5", side=SELL)))
    assert state(r) == ("A-5", "NONE", 99999, 2, 0, 0, 0, 8) and r.text == "order rejected"


def test_a_replaced_order_that_fills_at_its_new_price_is_done_under_its_last_clordid() -> None:
    e, a, b = engine(), Asker("A"), Asker("B")
    e.apply(b.new(SELL, 10000, 5))
    e.apply(a.new(BUY, 9990, 5))
    e.apply(a.replace("A-1", BUY, 10000, 5))  # A-2 crosses and fills whole
    for asked in ("A-1", "A-2"):
        assert state(report(e.apply(a.status(asked)))) == ("A-2", "2", 10000, 5, 5, 0, 50000, 2)


def test_only_the_last_n_done_orders_are_held_and_older_ones_say_so() -> None:
    e, a = engine(done_orders=2), Asker("A")
    for _ in range(3):
        e.apply(a.new(BUY, 9990, 1))
    e.apply(a.cancel("A-1", BUY))
    e.apply(a.cancel("A-2", BUY))
    e.apply(a.cancel("A-3", BUY))
    r = report(e.apply(a.status("A-1")))
    assert (r.status, r.order_id, r.cum_qty, r.leaves_qty) == (8, "NONE", 0, 0)
    assert r.text == ("order A-1 is no longer held (cancelled): the exchange keeps the final state of a "
                      "session's last 2 done orders")
    assert [report(e.apply(a.status(c))).status for c in ("A-2", "A-3")] == [4, 4]


def test_unknown_orders_and_request_clordids_are_rejected_with_a_reason() -> None:
    e, a = engine(), Asker("A")
    r = report(e.apply(a.status("never", symbol="ACORN.LAB", side=SELL)))
    assert (r.clordid, r.order_id, r.symbol, r.side, r.status, r.text) == (
        "never", "NONE", "ACORN.LAB", SELL, 8, "unknown order never")
    e.apply(a.new(BUY, 9990, 1))
    e.apply(a.cancel("A-1", BUY))  # A-2 is a cancel request's ClOrdID, not an order's
    assert report(e.apply(a.status("A-2"))).text == "unknown order A-2"


def test_a_status_request_written_twice_is_answered_once() -> None:
    e, a = engine(), Asker("A")
    e.apply(a.new(BUY, 9990, 1))
    req = a.status("A-1")
    assert len(e.apply(req)) == 1
    before = e.snapshot("0", "0-0", 0)
    result = e.apply_batch([req])
    assert (result.events, result.redelivered) == ([], 1)
    assert e.snapshot("0", "0-0", 0) == before
    # The same question again with its own MsgSeqNum is a new request.
    assert report(e.apply(a.status("A-1"))).exec_id == "E3"


def test_bad_status_requests_are_malformed() -> None:
    e = engine()
    with pytest.raises(MalformedCommand, match=r"StatusRequest\.clordid"):
        e.apply(StatusRequest("A", "", "", "ACORN.LAB", BUY, "", "gw1", 1, 1))
    with pytest.raises(MalformedCommand, match=r"StatusRequest\.order_id=None is not a string"):
        e.apply(StatusRequest("A", "c", None, "ACORN.LAB", BUY, "", "gw1", 1, 1))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- mass cancel

def test_mass_cancel_all_reports_first_then_cancels_each_order() -> None:
    e, a, b = engine(), Asker("A"), Asker("B")
    e.apply(a.new(BUY, 9990, 5))
    e.apply(a.new(SELL, 2510, 2, symbol="BIRCH.LAB"))
    e.apply(b.new(BUY, 9980, 1))
    events = e.apply(a.mass(clordid="mc"))
    head, cancels = events[0], [ev for ev in events if isinstance(ev, Cancelled)]
    assert head == MassCancelReport("A", "mc", "Q4", MASS_CANCEL_ALL, MASS_CANCEL_ALL, 0, 2, "", 0, "", a.seq)
    assert [(c.clordid, c.orig_clordid, c.order_id, c.text, c.qty, c.cum_qty) for c in cancels] == [
        ("A-1", "A-1", "1", "mass cancel", 5, 0), ("A-2", "A-2", "2", "mass cancel", 2, 0)]
    assert resting(e) == [("B", "B-1")]
    assert state(report(e.apply(a.status("A-1"))))[-1] == 4  # final state held


def test_mass_cancel_by_symbol_and_side() -> None:
    e, a = engine(), Asker("A")
    e.apply(a.new(BUY, 9990, 1))
    e.apply(a.new(SELL, 10010, 1))
    e.apply(a.new(BUY, 2490, 1, symbol="BIRCH.LAB"))
    e.apply(a.new(SELL, 2510, 1, symbol="BIRCH.LAB"))
    head = e.apply(a.mass(MASS_CANCEL_SYMBOL, "BIRCH.LAB", SELL))[0]
    assert isinstance(head, MassCancelReport) and (head.response, head.affected) == (MASS_CANCEL_SYMBOL, 1)
    assert resting(e) == [("A", "A-1"), ("A", "A-2"), ("A", "A-3")]
    head = e.apply(a.mass(MASS_CANCEL_ALL, "", BUY))[0]
    assert isinstance(head, MassCancelReport) and head.affected == 2
    assert resting(e) == [("A", "A-2")]
    # Nothing left in scope: not an error.
    events = e.apply(a.mass(MASS_CANCEL_SYMBOL, "BIRCH.LAB"))
    assert [(type(ev), ev.response, ev.affected) for ev in events] == [  # type: ignore[attr-defined]
        (MassCancelReport, MASS_CANCEL_SYMBOL, 0)]


@pytest.mark.parametrize(("request_type", "symbol", "side", "reason", "text"), [
    (MASS_CANCEL_SYMBOL, "NOPE.LAB", 0, MASS_REJ_UNKNOWN_SECURITY, "unknown symbol NOPE.LAB"),
    (MASS_CANCEL_SYMBOL, "", 0, MASS_REJ_UNKNOWN_SECURITY, "unknown symbol "),
    (3, "", 0, MASS_REJ_OTHER,
     "mass cancel request type 3 is not supported: only 1 (one symbol) or 7 (all orders)"),
    (9, "", 0, MASS_REJ_OTHER,
     "mass cancel request type 9 is not supported: only 1 (one symbol) or 7 (all orders)"),
    (MASS_CANCEL_ALL, "", 5, MASS_REJ_OTHER, "side 5 is neither 0 (both), 1 (buy) nor 2 (sell)"),
])
def test_bad_mass_cancels_are_rejected_and_cancel_nothing(request_type: int, symbol: str, side: int,
                                                          reason: int, text: str) -> None:
    e, a = engine(), Asker("A")
    e.apply(a.new(BUY, 9990, 1))
    events = e.apply(a.mass(request_type, symbol, side, clordid="bad"))
    assert events == [MassCancelReport("A", "bad", "Q2", request_type, 0, reason, 0, symbol, side, text,
                                       a.seq)]
    assert resting(e) == [("A", "A-1")]


def test_mass_cancel_redelivered_is_answered_once_and_a_reused_clordid_is_rejected() -> None:
    e, a = engine(), Asker("A")
    e.apply(a.new(BUY, 9990, 1))
    req = a.mass(clordid="m")
    assert len(e.apply(req)) == 3  # report, cancel, depth
    assert e.apply_batch([req]).redelivered == 1
    again = e.apply(a.mass(clordid="m"))
    assert [(ev.response, ev.reject_reason, ev.text) for ev in again] == [  # type: ignore[attr-defined]
        (0, MASS_REJ_OTHER, "duplicate ClOrdID m in this session")]
    assert report(e.apply(a.status("m"))).text == "unknown order m"


def test_mass_cancel_per_shard_answers_for_its_own_books_only() -> None:
    # Two shards, one instrument each: the gateway sends type 7 to both and adds the reports up.
    shards = [Engine([ACORN], id_prefix="0-"), Engine([BIRCH], id_prefix="1-")]
    a = Asker("A")
    shards[0].apply(a.new(BUY, 9990, 1))
    shards[1].apply(a.new(BUY, 2490, 1, symbol="BIRCH.LAB"))
    shards[1].apply(a.new(BUY, 2480, 1, symbol="BIRCH.LAB"))
    req = a.mass()
    heads = [s.apply(req)[0] for s in shards]
    assert [(h.order_id, h.affected) for h in heads] == [("0-Q2", 1), ("1-Q3", 2)]  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- snapshot

def test_snapshot_keeps_done_orders_renames_and_status_requests() -> None:
    e, a, b = engine(done_orders=3), Asker("A"), Asker("B")
    e.apply(a.new(SELL, 10000, 3))
    e.apply(b.new(BUY, 10000, 3))
    e.apply(a.new(BUY, 9990, 2))
    e.apply(a.replace("A-2", BUY, 9991, 2))
    req = a.status("A-2")
    e.apply(req)
    snap = decode(encode(e.snapshot("0", "5-0", 9)))
    restored = Engine.restore(snap, [ACORN, BIRCH], limits=e.limits)  # type: ignore[arg-type]
    assert restored.snapshot("0", "5-0", 9) == snap
    assert restored.apply_batch([req]).redelivered == 1
    for name, asked in (("A", "A-1"), ("A", "A-2"), ("B", "B-1")):
        ask = Asker(name)
        ask.seq = 100
        req_again = ask.status(asked)
        want, got = e.apply(req_again), restored.apply(req_again)
        assert want == got and want[0].status in (2, 0)  # type: ignore[attr-defined]


def test_a_snapshot_restored_with_a_smaller_ring_keeps_the_most_recent() -> None:
    e, a = engine(done_orders=5), Asker("A")
    for _ in range(4):
        e.apply(a.new(BUY, 9990, 1, tif=IOC))  # each done at once
    restored = Engine.restore(e.snapshot("0", "1-0", 0), [ACORN, BIRCH], limits=Limits(done_orders=2))
    a.seq = 100
    assert [report(restored.apply(a.status(f"A-{i}"))).status for i in range(1, 5)] == [8, 8, 4, 4]


def test_a_snapshot_written_before_done_orders_were_kept_still_restores() -> None:
    e, a = engine(), Asker("A")
    e.apply(a.new(BUY, 9990, 1))
    snap = e.snapshot("0", "1-0", 0)
    old = replace(snap, sessions=tuple(s[:6] for s in snap.sessions))
    restored = Engine.restore(old, [ACORN, BIRCH])
    assert state(report(restored.apply(a.status("A-1"))))[:2] == ("A-1", "1")


def test_malformed_mass_cancels_and_image_requests_are_refused_as_producer_bugs() -> None:
    e = engine()
    with pytest.raises(MalformedCommand, match=r"MassCancel\.request_type='7' is not an integer"):
        e.apply(MassCancel("A", "m", "7", "", 0, "gw1", 1, 1))  # type: ignore[arg-type]
    with pytest.raises(MalformedCommand, match=r"MassCancel\.clordid='' is not a non-empty string"):
        e.apply(MassCancel("A", "", 7, "", 0, "gw1", 1, 1))
    with pytest.raises(MalformedCommand, match=r"ImageRequest\.reply_to='' is not a non-empty string"):
        e.apply(ImageRequest("", 1))
    assert e.sessions == {} and e.commands == 0
