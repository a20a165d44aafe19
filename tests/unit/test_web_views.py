"""Bus messages as the page reads them: prices in decimals, fills and refusals picked out."""

from __future__ import annotations

from services.web.lab import dictionary_of
from services.web.views import MarketView, execution_view, state_view, wire_view
from shared.config import common_settings
from shared.fix import dictionary
from shared.schema import Depth, LabOrder, LabState, Trade, WireRecord

D = dictionary.load()
COMMON = common_settings({"REDIS_URL": "redis://127.0.0.1:1/0"})


def raw(body: str) -> bytes:
    b = body.replace("|", "\x01").encode()
    head = b"8=FIX.4.4\x019=" + str(len(b)).encode() + b"\x01"
    return head + b + b"10=%03d\x01" % (sum(head + b) % 256)


def test_market_view_prices_and_tape() -> None:
    m = MarketView(COMMON, tape_size=2)
    view = m.apply(Depth("ACORN.LAB", ((9950, 10, 1),), ((10050, 5, 2),), 1))
    assert view["bids"] == [["99.50", 10, 1]] and view["asks"] == [["100.50", 5, 2]]
    for i in range(3):
        m.apply(Trade("BIRCH.LAB", 2500 + i, 1, f"M{i}", 1, i))
    snap = m.snapshot()
    assert snap[0]["symbol"] == "ACORN.LAB"
    assert [t["price"] for t in snap[-1]["trades"]] == ["25.01", "25.02"]  # bounded tape
    assert snap[-1]["trades"][0]["aggressor"] == "buy"


def test_fill_and_reject_are_picked_out_of_the_wire() -> None:
    fill = raw("35=8|34=5|49=FIXLAB|56=LAB001|52=x|11=c1|17=E1|31=100|32=3|14=3|151=7|39=1|54=2|"
               "55=ACORN.LAB|150=F|")
    view, parsed = wire_view(WireRecord("l", 4, "exchange", fill, False, 1), D)
    assert view["msg_name"] == "ExecutionReport" and view["category"] == "app" and view["seq"] == 5
    assert [54, "Side", "2", "Sell", "body"] in view["fields"]
    f = execution_view(parsed, "exchange")
    assert f is not None and f["type"] == "fill" and f["side"] == "sell" and f["leaves_qty"] == "7"
    rej = raw("35=8|34=6|49=FIXLAB|56=LAB001|52=x|11=c2|150=8|39=8|58=too many open orders|")
    _, parsed = wire_view(WireRecord("l", 5, "exchange", rej, False, 1), D)
    n = execution_view(parsed, "exchange")
    assert n is not None and n["level"] == "error" and "too many open orders" in n["text"]
    assert execution_view(parsed, "client") is None


def test_state_view_time_left_and_orders() -> None:
    s = LabState("l", "gw", "LAB001", "logged_on", 3, 4, 4, 3, 6, 61_000_000_000, False, True,
                 (LabOrder("c1", "ACORN.LAB", 1, "100", 10, 0, 10, "0"),), "", 1)
    v = state_view(s, 1_000_000_000, 20)
    assert v["expires_in_s"] == 60.0 and v["drop_armed"] is True
    assert (v["comp_id"], v["gateway_id"]) == ("LAB001", "gw")  # the page shows which gateway
    assert v["orders"][0]["side"] == "buy" and v["orders"][0]["status"] == "New"


def test_a_fix42_session_is_named_with_fix42_and_its_fills_and_status_answers_told_apart() -> None:
    def raw42(body: str) -> bytes:
        return raw(body).replace(b"8=FIX.4.4", b"8=FIX.4.2", 1)

    fill = raw42("35=8|34=5|49=FIXLAB|56=LAB42-01|52=x|11=c1|17=E1|20=0|31=100|32=3|14=10|151=0|39=2|54=1|"
                 "55=ACORN.LAB|150=2|58=TrdMatchID=M1|")
    d42 = dictionary_of(fill, D)
    assert d42.begin_string == "FIX.4.2" and dictionary_of(raw("35=0|"), D) is D
    view, parsed = wire_view(WireRecord("l", 4, "exchange", fill, False, 1), d42)
    assert [150, "ExecType", "2", "Fill", "body"] in view["fields"]
    assert [20, "ExecTransType", "0", "New", "body"] in view["fields"]
    f = execution_view(parsed, "exchange")
    assert f is not None and f["type"] == "fill" and f["last_qty"] == "3"
    # A status answer (ExecTransType 3) about a filled order, or an unknown one: no fill, no refusal.
    for body in ("11=c1|17=E2|20=3|39=2|150=2|", "11=zz|17=E3|20=3|39=8|150=8|"):
        _, parsed = wire_view(WireRecord("l", 6, "exchange", raw42(f"35=8|34=6|{body}"), False, 1), d42)
        assert execution_view(parsed, "exchange") is None


def test_a_fixt_session_is_named_with_fixt11_and_fix50sp2() -> None:
    logon = raw("35=A|34=1|49=LAB50-01|56=FIXLAB|52=x|98=0|108=6|141=Y|1137=9|").replace(
        b"8=FIX.4.4", b"8=FIXT.1.1", 1)
    d50 = dictionary_of(logon, D)
    view, _ = wire_view(WireRecord("l", 1, "client", logon, False, 1), d50)
    assert view["msg_name"] == "Logon" and [1137, "DefaultApplVerID", "9", "", "body"] in view["fields"]
    assert d50.field_name(880) == "TrdMatchID" and d50.meaning(35, "8") == "ExecutionReport"


def test_phase_indicative_countdown_and_the_auction_on_the_tape() -> None:
    from services.web.hub import _latest
    from shared.schedule import parse_schedule
    from shared.schema import (
        PHASE_CONTINUOUS,
        PHASE_HALTED,
        PHASE_PRE_OPEN,
        SELL,
        Indicative,
        PhaseChanged,
    )

    second = 1_000_000_000
    schedule = parse_schedule("demo:100", ("ACORN.LAB", "BIRCH.LAB"))
    m = MarketView(COMMON, tape_size=5, schedule=schedule)
    assert m.snapshot()[-1] == {"type": "tape", "trades": []}  # no phase news: nothing said
    cycle = 1_000 * 100 * second
    v = m.apply(PhaseChanged("ACORN.LAB", PHASE_PRE_OPEN, PHASE_CONTINUOUS, "by the operator", 1),
                cycle + 5 * second)
    assert (v["type"], v["phase"], v["label"], v["call"], v["reason"]) == (
        "phase", "PRE_OPEN", "Pre-open call", True, "by the operator")
    assert v["indicative"] is None and v["uncross_in_s"] == 15.0  # the demo day opens at 20 s
    v = m.apply(Indicative("ACORN.LAB", 10050, 30, 5, SELL, 2), cycle + 6 * second)
    assert v["indicative"] == {"price": "100.50", "volume": 30, "imbalance_qty": 5, "imbalance_side": "sell"}
    assert v["uncross_in_s"] == 14.0
    # The next change is a call again (a halt in the demo's continuous trading): no countdown.
    assert m.phase_view("ACORN.LAB", cycle + 30 * second)["uncross_in_s"] is None
    nothing = m.apply(Indicative("ACORN.LAB", 0, 0, 0, 0, 3), cycle)
    assert nothing["indicative"] == {"price": None, "volume": 0, "imbalance_qty": 0, "imbalance_side": "none"}
    t = m.apply(Trade("ACORN.LAB", 10050, 30, "M9", 0, 4))
    assert (t["auction"], t["aggressor"]) == (True, "none")
    assert m.apply(Trade("ACORN.LAB", 10050, 1, "M10", 1, 5))["auction"] is False
    v = m.apply(PhaseChanged("ACORN.LAB", PHASE_CONTINUOUS, PHASE_PRE_OPEN, "schedule", 6), cycle)
    assert (v["label"], v["call"], v["indicative"], v["uncross_in_s"]) == ("Continuous", False, None, None)
    assert [x["symbol"] for x in m.snapshot() if x["type"] == "phase"] == ["ACORN.LAB"]
    assert MarketView(COMMON, 5).apply(  # without a schedule: no countdown
        PhaseChanged("BIRCH.LAB", PHASE_HALTED, PHASE_CONTINUOUS, "news", 1), cycle)["uncross_in_s"] is None

    # Conflated, a read keeps every PhaseChanged and each book's last Indicative: the view ends the same.
    msgs = [PhaseChanged("ACORN.LAB", PHASE_PRE_OPEN, PHASE_CONTINUOUS, "a", 1),
            Indicative("ACORN.LAB", 100, 1, 0, 0, 2), Indicative("ACORN.LAB", 101, 2, 0, 0, 3),
            Indicative("BIRCH.LAB", 2500, 4, 1, 1, 3), Trade("ACORN.LAB", 101, 2, "M1", 0, 4),
            Indicative("ACORN.LAB", 0, 0, 0, 0, 4), PhaseChanged("ACORN.LAB", PHASE_CONTINUOUS,
                                                                 PHASE_PRE_OPEN, "b", 4)]
    kept = _latest(msgs, 10)
    assert kept == [msgs[0], msgs[3], msgs[4], msgs[5], msgs[6]]
    whole, conflated = MarketView(COMMON, 5), MarketView(COMMON, 5)
    for x in msgs:
        whole.apply(x)
    for x in kept:
        conflated.apply(x)
    assert whole.snapshot() == conflated.snapshot()
