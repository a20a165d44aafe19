"""Trading status over FIX (services/gateway/status.py): SecurityStatusRequest -> SecurityStatus,
TradingSessionStatusRequest -> TradingSessionStatus, snapshot and subscription, pushed at each
PhaseChanged; every body valid for a strict stock dictionary of FIX 4.4, 4.2 and 5.0 SP2."""

from __future__ import annotations

import pytest

from services.gateway.dialects import Dialect
from services.gateway.status import TradingStatus
from shared.schema import PHASE_CLOSED, PHASE_CONTINUOUS, PHASE_HALTED, PHASE_PRE_CLOSE, PHASE_PRE_OPEN
from tests.unit.test_gateway_trading_day import _validate, dialect  # noqa: F401 (a fixture)
from tests.unit.test_gateway_translate import ACORN, BIRCH, TS, body


@pytest.fixture
def st() -> TradingStatus:
    return TradingStatus([ACORN, BIRCH], max_subscriptions=2)


def test_a_snapshot_of_one_symbol_and_of_every_symbol(st: TradingStatus) -> None:
    (session, one), = st.request("C1", "e", {"324": "s1", "55": "ACORN.LAB", "263": "0"}, TS)
    f = body(one)
    assert session == "C1"
    assert (f["35"], f["324"], f["55"], f["326"], f["625"], f["325"], f["336"]) == (
        "f", "s1", "ACORN.LAB", "17", "3", "N", "1")
    every = st.request("C1", "e", {"324": "s2", "263": "0"}, TS)
    assert [body(b)["55"] for _s, b in every] == ["ACORN.LAB", "BIRCH.LAB"]
    assert st.securities["C1"] == {}  # a snapshot subscribes to nothing


def test_an_unknown_symbol_is_unknown_or_invalid_with_text(st: TradingStatus) -> None:
    (_s, out), = st.request("C1", "e", {"324": "s1", "55": "NOPE", "263": "1"}, TS)
    f = body(out)
    assert f["326"] == "20" and "unknown symbol 'NOPE'" in f["58"] and "625" not in f
    assert st.securities["C1"] == {}


def test_each_phase_change_is_pushed_to_the_symbols_subscribers_only(st: TradingStatus) -> None:
    st.request("C1", "e", {"324": "a", "55": "ACORN.LAB", "263": "1"}, TS)
    st.request("C2", "e", {"324": "b", "55": "BIRCH.LAB", "263": "1"}, TS)
    st.request("C3", "e", {"324": "all", "263": "1"}, TS)
    seen = []
    for phase, prev in ((PHASE_HALTED, PHASE_CONTINUOUS), (PHASE_CONTINUOUS, PHASE_HALTED),
                        (PHASE_PRE_CLOSE, PHASE_CONTINUOUS), (PHASE_CLOSED, PHASE_PRE_CLOSE),
                        (PHASE_PRE_OPEN, PHASE_CLOSED)):
        out = st.phase_changed("ACORN.LAB", phase, prev, "operator", TS)
        assert [s for s, _b in out] == ["C1", "C3"]
        f = body(out[0][1])
        assert f["325"] == "Y" and f["58"] == "operator"
        seen.append((f["326"], f["625"]))
    assert seen == [("2", "9"), ("3", "3"), ("21", "4"), ("18", "5"), ("21", "2")]
    assert st.phase_changed("NOPE", PHASE_HALTED, PHASE_CONTINUOUS, "", TS) == []
    st.request("C1", "e", {"324": "a", "263": "2"}, TS)
    assert [s for s, _b in st.phase_changed("ACORN.LAB", PHASE_HALTED, PHASE_PRE_OPEN, "", TS)] == ["C3"]


def test_the_trading_session_status_follows_the_instruments(st: TradingStatus) -> None:
    (_s, h), = st.request("C1", "g", {"335": "t1", "263": "1"}, TS)
    assert (body(h)["35"], body(h)["340"], body(h)["336"], body(h)["325"]) == ("h", "2", "1", "N")
    # One instrument closed: the session is still open (mixed); both closed: closed.
    assert st.phase_changed("ACORN.LAB", PHASE_CLOSED, PHASE_CONTINUOUS, "", TS) == []
    out = st.phase_changed("BIRCH.LAB", PHASE_CLOSED, PHASE_CONTINUOUS, "end of day", TS)
    assert [(s, body(b)["340"], body(b)["325"]) for s, b in out] == [("C1", "3", "Y")]
    st.drop_session("C1")
    assert st.phase_changed("BIRCH.LAB", PHASE_PRE_OPEN, PHASE_CLOSED, "", TS) == []


def test_subscriptions_are_bounded_per_session(st: TradingStatus) -> None:
    for req in ("a", "b"):
        st.request("C1", "e", {"324": req, "55": "ACORN.LAB", "263": "1"}, TS)
    (_s, third), = st.request("C1", "e", {"324": "c", "55": "ACORN.LAB", "263": "1"}, TS)
    assert "a snapshot only" in body(third)["58"] and set(st.securities["C1"]) == {"a", "b"}


@pytest.mark.parametrize("version", ["4.2", "4.4", "5.0SP2"])
def test_every_status_body_is_valid_for_a_strict_stock_dictionary(
        st: TradingStatus, version: str, dialect: dict[str, Dialect]) -> None:  # noqa: F811
    say = dialect.get(version, lambda b: b)
    bodies = [b for _s, b in st.request("C1", "e", {"324": "a", "263": "1"}, TS)]
    bodies += [b for _s, b in st.request("C1", "e", {"324": "x", "55": "NOPE", "263": "0"}, TS)]
    bodies += [b for _s, b in st.request("C1", "g", {"335": "t", "263": "1"}, TS)]
    for phase, prev in ((PHASE_HALTED, PHASE_CONTINUOUS), (PHASE_CONTINUOUS, PHASE_HALTED),
                        (PHASE_PRE_OPEN, PHASE_CONTINUOUS), (PHASE_CLOSED, PHASE_PRE_CLOSE)):
        for sym in ("ACORN.LAB", "BIRCH.LAB"):
            bodies += [b for _s, b in st.phase_changed(sym, phase, prev, "why", TS)]
    assert {b[3] for b in bodies} == {"f", "h"}
    for b in bodies:
        _validate(version, say(b))  # type: ignore[operator]
    if version == "4.2":  # no Pre-open (21) there: Price indication; no TradingSessionSubID
        pre_open = body(say(st.phase_changed("ACORN.LAB", PHASE_PRE_OPEN, PHASE_CLOSED, "", TS)[0][1]))  # type: ignore[operator]
        assert pre_open["326"] == "5" and "625" not in pre_open
