"""OrderStatusRequest (H), OrderMassCancelRequest (q) and SecurityListRequest (x) at the gateway, pure:
translation in (services.gateway.inbound), routing by shard (intake), reports out (outbound), one
OrderMassCancelReport for several shards (MassCancelJoin), the security list (securities)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from services.gateway.inbound import Inbound, Refusal
from services.gateway.intake import Publisher
from services.gateway.outbound import MassCancelJoin, Outbound
from services.gateway.resp import RespConnection
from services.gateway.securities import MAX_QTY, MIN_QTY, SecurityLists
from services.matcher.engine import Limits
from shared import streams
from shared.config import Instrument
from shared.fix.codec import split_fields
from shared.schema import (
    MASS_CANCEL_ALL,
    MASS_CANCEL_SYMBOL,
    Accepted,
    Cancelled,
    MassCancel,
    MassCancelReport,
    Message,
    StatusReport,
    StatusRequest,
)

ACORN = Instrument("ACORN.LAB", 10_000, Decimal("0.01"))
BIRCH = Instrument("BIRCH.LAB", 2_500, Decimal("0.01"), shard="b", pro_rata=True)
TS = 1_767_225_600_123_456_789  # 2026-01-01 00:00:00.123 UTC


def fields(raw: str) -> dict[str, str]:
    return split_fields(raw.replace("|", "\x01"))


def body(text: str) -> dict[str, str]:
    assert text.endswith("\x01")
    return split_fields(text)


@pytest.fixture
def inbound() -> Inbound:
    return Inbound([ACORN, BIRCH], "gw1", "gw1-x")


@pytest.fixture
def outbound() -> Outbound:
    return Outbound([ACORN, BIRCH])


STATUS = "35=H|34=9|49=CLIENT01|56=FIXLAB|11=o1|55=ACORN.LAB|54=1|"
MASS = "35=q|34=10|49=CLIENT01|56=FIXLAB|11=mc1|530=7|60=20260101-00:00:00.000|"


# ----------------------------------------------------------------------------- H: OrderStatusRequest

def test_status_request_becomes_a_status_request_for_its_symbols_shard(inbound: Inbound) -> None:
    cmd = inbound.command("H", fields(STATUS + "37=7|790=st-1|"), TS)
    assert cmd == StatusRequest("CLIENT01", "o1", "7", "ACORN.LAB", 1, "st-1", "gw1", 9, TS)
    assert inbound.command("H", fields(STATUS), TS) == StatusRequest("CLIENT01", "o1", "", "ACORN.LAB", 1,
                                                                      "", "gw1", 9, TS)


@pytest.mark.parametrize(("change", "reason", "words"), [
    (("55=ACORN.LAB|", "55=NOPE|"), "1", "unknown symbol 'NOPE'"),
    (("55=ACORN.LAB|", ""), "1", "needs a Symbol (55)"),
    (("54=1|", "54=5|"), "99", "Side 54=5 is not supported"),
])
def test_a_status_request_that_cannot_be_answered_gets_an_order_status_report_rejected(
        inbound: Inbound, change: tuple[str, str], reason: str, words: str) -> None:
    out = inbound.command("H", fields(STATUS.replace(*change) + "790=st-2|"), TS)
    assert isinstance(out, Refusal) and out.session == "CLIENT01"
    er = body(out.body)
    assert (er["35"], er["150"], er["39"], er["17"], er["11"], er["37"]) == ("8", "I", "8", "0", "o1", "NONE")
    assert er["103"] == reason and words in er["58"] and er["790"] == "st-2"
    assert (er["151"], er["14"], er["6"]) == ("0", "0", "0")


def test_a_known_orders_status_is_an_execution_report_of_exec_type_i(outbound: Outbound) -> None:
    ev = StatusReport("CLIENT01", "o1", "7", "ACORN.LAB", 2, 10_050, 10, 4, 6, 40_200, 1, "", "st-1", "E9",
                      TS)
    er = body(outbound.report(ev))
    assert er == {"35": "8", "37": "7", "17": "0", "11": "o1", "150": "I", "39": "1", "55": "ACORN.LAB",
                  "54": "2", "38": "10", "40": "2", "44": "100.50", "151": "6", "14": "4", "6": "100.50",
                  "60": "20260101-00:00:00.123", "790": "st-1"}


def test_an_unknown_orders_status_is_rejected_with_its_reason(outbound: Outbound) -> None:
    ev = StatusReport("CLIENT01", "zz", "NONE", "ACORN.LAB", 1, 0, 0, 0, 0, 0, 8, "unknown order 'zz'", "",
                      "", TS)
    er = body(outbound.report(ev))
    assert (er["150"], er["39"], er["37"], er["17"], er["103"], er["58"]) == (
        "I", "8", "NONE", "0", "5", "unknown order 'zz'")
    assert "38" not in er and "44" not in er and "790" not in er


# ----------------------------------------------------------------------------- q: OrderMassCancelRequest

def test_mass_cancel_of_one_symbol_and_of_all_orders(inbound: Inbound) -> None:
    by_symbol = inbound.command("q", fields(MASS.replace("530=7|", "530=1|55=BIRCH.LAB|")), TS)
    assert by_symbol == MassCancel("CLIENT01", "mc1", MASS_CANCEL_SYMBOL, "BIRCH.LAB", 0, "gw1", 10, TS)
    every = inbound.command("q", fields(MASS + "55=ACORN.LAB|"), TS)
    assert every == MassCancel("CLIENT01", "mc1", MASS_CANCEL_ALL, "", 0, "gw1", 10, TS)
    sells = inbound.command("q", fields(MASS + "54=2|"), TS)
    assert isinstance(sells, MassCancel) and sells.side == 2 and sells.symbol == ""


@pytest.mark.parametrize(("change", "reason", "words"), [
    (("530=7|", "530=1|55=NOPE|"), "1", "unknown symbol 'NOPE'"),
    (("530=7|", "530=1|"), "1", "530=1 needs a Symbol (55)"),
    (("530=7|", "530=3|"), "99", "530=3 is not supported"),
    (("530=7|", "530=7|54=7|"), "99", "Side 54=7 is not supported"),
])
def test_a_mass_cancel_the_exchange_does_not_take_is_refused_with_a_report(
        inbound: Inbound, change: tuple[str, str], reason: str, words: str) -> None:
    out = inbound.command("q", fields(MASS.replace(*change)), TS)
    assert isinstance(out, Refusal)
    r = body(out.body)
    assert (r["35"], r["11"], r["37"], r["531"], r["532"], r["533"]) == ("r", "mc1", "NONE", "0", reason, "0")
    assert r["530"] == fields(MASS.replace(*change))["530"] and words in r["58"]


def test_busy_refusals_of_status_and_mass_cancel(inbound: Inbound) -> None:
    status = body(inbound.busy("H", fields(STATUS), 12, TS).body)
    assert (status["35"], status["150"], status["39"]) == ("8", "I", "8") and "busy" in status["58"]
    mass = body(inbound.busy("q", fields(MASS), 12, TS).body)
    assert (mass["35"], mass["531"], mass["532"]) == ("r", "0", "99") and "busy" in mass["58"]


def test_a_mass_cancel_of_every_order_goes_to_every_shard_and_one_of_a_symbol_to_its_own() -> None:
    insts = [ACORN, BIRCH]
    publisher = Publisher(RespConnection("redis://127.0.0.1:1/0"), Inbound(insts, "gw1"), insts, 1000, "")
    every = "8=FIX.4.4|9=1|" + MASS + "10=000|"
    birch = every.replace("530=7|", "530=1|55=BIRCH.LAB|")
    grouped, count = publisher.group([(every.replace("|", "\x01"), TS), (birch.replace("|", "\x01"), TS)])
    assert count == 2
    assert sorted(grouped) == [streams.orders_stream("0"), streams.orders_stream("b")]
    assert [w[0] for w in grouped[streams.orders_stream("0")]] == [MassCancel.CODE]
    assert [(w[3], w[4]) for w in grouped[streams.orders_stream("b")]] == [(7, ""), (1, "BIRCH.LAB")]


def test_a_mass_cancel_report_is_an_order_mass_cancel_report(outbound: Outbound) -> None:
    ok = body(outbound.report(MassCancelReport("C1", "mc1", "M5", 7, 7, 0, 3, "", 2, "", TS)))
    assert ok == {"35": "r", "11": "mc1", "37": "M5", "530": "7", "531": "7", "533": "3", "54": "2",
                  "60": "20260101-00:00:00.123"}
    no = body(outbound.report(MassCancelReport("C1", "mc2", "M6", 1, 0, 1, 0, "NOPE", 0, "unknown", TS)))
    assert (no["531"], no["532"], no["533"], no["55"], no["58"]) == ("0", "1", "0", "NOPE", "unknown")
    assert "54" not in no


# ----------------------------------------------------------------------------- one r for several shards

def report(affected: int, session: str = "C1", clordid: str = "mc1", kind: int = 7) -> MassCancelReport:
    return MassCancelReport(session, clordid, "M1", kind, kind, 0, affected, "", 0, "", TS)


def cancelled(clordid: str, session: str = "C1") -> Cancelled:
    return Cancelled(session, clordid, clordid, "O-" + clordid, "ACORN.LAB", 1, 10_000, 5, 0, 0,
                     "mass cancel", "E-" + clordid, TS)


def accepted(clordid: str, session: str = "C1") -> Accepted:
    return Accepted(session, clordid, "O-" + clordid, "ACORN.LAB", 1, 10_000, 5, 0, "E-" + clordid, TS)


def names(events: list[Message] | tuple[Message, ...]) -> list[str]:
    out = []
    for ev in events:
        if isinstance(ev, MassCancelReport):
            out.append(f"r{ev.affected}")
        else:
            out.append(f"{type(ev).__name__[0]}:{getattr(ev, 'clordid', '')}")
    return out


def test_every_shards_report_makes_one_report_sent_before_the_cancelled_orders() -> None:
    join = MassCancelJoin(2)
    first = join.feed([accepted("a1"), report(2), cancelled("a2"), cancelled("a3"), accepted("a4")])
    # The first shard's report and its two Cancelled wait; what is not part of the request passes.
    assert names(list(first)) == ["A:a1", "A:a4"]
    assert join.pending == 1
    second = join.feed([report(1), cancelled("b1"), accepted("b2")])
    assert names(list(second)) == ["r3", "C:a2", "C:a3", "C:b1", "A:b2"]
    assert join.pending == 0


def test_a_shard_with_nothing_to_cancel_still_answers_and_sessions_do_not_mix() -> None:
    join = MassCancelJoin(2)
    assert list(join.feed([report(0), report(1, session="C2"), cancelled("x", "C2")])) == []
    out = join.feed([report(0, session="C2"), report(2), cancelled("a"), cancelled("b")])
    assert names(list(out)) == ["r1", "C:x", "r2", "C:a", "C:b"]
    assert [ev.session for ev in out] == ["C2", "C2", "C1", "C1", "C1"]  # type: ignore[attr-defined]


def test_a_rejected_shard_makes_the_whole_report_rejected() -> None:
    join = MassCancelJoin(2)
    join.feed([report(1), cancelled("a")])
    refusal = MassCancelReport("C1", "mc1", "M1", 7, 0, 99, 0, "", 0, "shard closed", TS)
    (merged, held) = join.feed([refusal])
    assert isinstance(merged, MassCancelReport)
    assert (merged.response, merged.reject_reason, merged.affected, merged.text) == (0, 99, 1, "shard closed")
    assert names([held]) == ["C:a"]


def test_one_shard_or_one_symbol_passes_as_it_is() -> None:
    events = [report(2), cancelled("a"), cancelled("b")]
    assert list(MassCancelJoin(1).feed(events)) == events
    by_symbol = [report(1, kind=1), cancelled("a")]
    assert list(MassCancelJoin(3).feed(by_symbol)) == by_symbol


def test_requests_waiting_for_a_shard_are_bounded() -> None:
    join = MassCancelJoin(2, max_pending=2)
    assert list(join.feed([report(1, clordid="m1"), cancelled("a")])) == []
    assert list(join.feed([report(0, clordid="m2")])) == []
    # A third waiting request gives the oldest as it stands: one shard's count, its held orders.
    out = join.feed([report(0, clordid="m3")])
    assert names(list(out)) == ["r1", "C:a"] and out[0].clordid == "m1"  # type: ignore[attr-defined]
    assert join.pending == 2


# ----------------------------------------------------------------------------- x: SecurityListRequest

def test_the_security_list_of_every_instrument() -> None:
    lists = SecurityLists([ACORN, BIRCH], "gw1-SL")
    raw = lists.answer(fields("35=x|320=sl-1|559=4|"))
    assert raw.startswith("35=y\x01320=sl-1\x01322=gw1-SL-1\x01560=0\x01393=2\x01893=Y\x01146=2\x01"
                          "55=ACORN.LAB\x01")
    entries = raw.split("\x0155=")[1:]
    acorn, birch = (split_fields("55=" + e) for e in entries)
    assert acorn == {"55": "ACORN.LAB", "107": "price-time", "561": "1", "562": "1",
                     "58": "tick=0.01 reference=100.00 band=80.00-120.00 min_qty=1 max_qty=1000 "
                           "matching=price-time"}
    assert birch["107"] == "pro-rata" and "reference=25.00 band=20.00-30.00" in birch["58"]
    assert lists.answer(fields("35=x|320=sl-2|559=4|")).split("\x01")[2] == "322=gw1-SL-2"


@pytest.mark.parametrize(("request_fields", "result", "entries"), [
    ("559=0|55=BIRCH.LAB|", "0", 1),
    ("559=0|55=NOPE|", "2", 0),
    ("559=0|", "1", 0),
    ("559=1|", "1", 0),
    ("559=3|", "1", 0),
])
def test_the_security_list_of_one_symbol_and_unsupported_requests(
        request_fields: str, result: str, entries: int) -> None:
    y = body(SecurityLists([ACORN, BIRCH], "p").answer(fields("35=x|320=r9|" + request_fields)))
    assert (y["35"], y["320"], y["560"]) == ("y", "r9", result)
    assert int(y.get("146", "0")) == entries


def test_the_listed_quantity_limits_are_the_matchers() -> None:
    limits = Limits()
    assert (limits.min_qty, limits.max_qty) == (MIN_QTY, MAX_QTY)
