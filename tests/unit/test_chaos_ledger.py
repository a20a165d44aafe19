"""The fault suite's accounting: what counts as lost, duplicated, unreported (benchmarks/chaos/ledger.py)."""

from __future__ import annotations

from benchmarks.chaos.ledger import Ledger, tally


def new(clordid: str, exec_id: str, **extra: str) -> dict[int, str]:
    return {11: clordid, 150: "0", 17: exec_id, **{int(k[1:]): v for k, v in extra.items()}}


def fill(clordid: str, exec_id: str, qty: int = 1) -> dict[int, str]:
    return {11: clordid, 150: "F", 17: exec_id, 32: str(qty)}


def ledger_of(*reports: dict[int, str], sent: tuple[str, ...] = ("a", "b", "c")) -> Ledger:
    ledger = Ledger()
    for c in sent:
        ledger.sent(c, 1)
    for r in reports:
        ledger.report(r)
    return ledger


def test_an_acknowledged_order_is_safe_resting_filled_or_cancelled() -> None:
    ledger = ledger_of(new("a", "E1"), new("b", "E2"), fill("b", "E3"), new("c", "E4"),
                       {11: "c", 150: "4", 17: "E5"})
    t = tally(ledger.orders, {"a": 0})
    assert (t.acknowledged, t.resting, t.filled, t.cancelled, t.lost, t.duplicated) == (3, 1, 1, 1, 0, 0)
    assert t.ok()


def test_an_acknowledged_order_gone_from_the_book_with_no_trace_is_lost() -> None:
    ledger = ledger_of(new("a", "E1"))
    t = tally(ledger.orders, {})
    assert (t.lost, t.examples) == (1, ("a: New, filled 0 of 1, not in the book",))
    assert not t.ok()


def test_a_final_event_on_the_bus_the_client_never_got_is_unreported_not_lost() -> None:
    t = tally(ledger_of(new("a", "E1")).orders, {}, done_on_bus={"a"})
    assert (t.lost, t.unreported) == (0, 1)
    # Resting, but the matcher filled more than the client was told.
    t = tally(ledger_of(new("a", "E1")).orders, {"a": 1})
    assert (t.lost, t.unreported, t.resting) == (0, 1, 1)


def test_two_news_or_an_overfill_is_a_duplicate_but_a_resent_report_is_not() -> None:
    ledger = ledger_of(new("a", "E1"), new("a", "E2"), new("b", "E3"), fill("b", "E4"), fill("b", "E5"),
                       new("c", "E6"), new("c", "E6", t43="Y"), fill("c", "E7"), fill("c", "E7"))
    t = tally(ledger.orders, {"a": 0})
    assert t.duplicated == 2 and t.redelivered == 2
    assert ledger.orders["c"].possdup == 1 and t.resent == 1


def test_orders_without_a_new() -> None:
    ledger = ledger_of({11: "a", 150: "8", 17: "E1", 58: "too many"}, sent=("a", "b", "c", "d"))
    ledger.report(new("zz", "E9"))  # not ours
    t = tally(ledger.orders, {"b": 0}, done_on_bus={"c"})
    assert (t.rejected, t.unconfirmed, t.unanswered, t.acknowledged) == (1, 2, 1, 0)
    assert ledger.orders["a"].text == "too many" and ledger.stray == 1
