"""Pre-trade risk (services/gateway/risk.py), the guard in front of the intake (guard.py) and the
sessions file's [FIRM] sections: pure, no QuickFIX, no Redis."""

from __future__ import annotations

from decimal import Decimal

import pytest

from services.gateway.guard import DROP_COPY_TEXT, KILLED_TEXT, Guard
from services.gateway.inbound import Inbound
from services.gateway.risk import MICRO, NO_LIMITS, Limits, RiskBook, parse_limits
from services.gateway.sessions import (
    drop_copy_sessions,
    firm_of,
    parse_firms,
    parse_sessions_text,
    pool_sessions,
)
from shared.config import ConfigError, Instrument
from shared.schema import BUY, SELL, Accepted, Cancelled, Filled, Refused, Rejected, Replaced

ACORN = Instrument("ACORN.LAB", 10000, Decimal("0.01"))
BIRCH = Instrument("BIRCH.LAB", 2500, Decimal("0.01"), shard="b")


def money(x: str) -> int:
    return int(Decimal(x) * MICRO)


def book(limits: Limits, firm: Limits | None = None, firm_members: tuple[str, ...] = ()) -> RiskBook:
    firms = {"F": firm} if firm is not None else {}
    return RiskBook([ACORN, BIRCH], {"S": limits}, firms, {m: "F" for m in firm_members})


def accepted(clordid: str, side: int = BUY, price: int = 9000, qty: int = 10, session: str = "S") -> Accepted:
    return Accepted(session, clordid, "o-" + clordid, "ACORN.LAB", side, price, qty, 0, "e", 1)


def filled(clordid: str, last_qty: int, leaves: int, side: int = BUY, price: int = 9000,
           session: str = "S") -> Filled:
    return Filled(session, clordid, "o-" + clordid, "ACORN.LAB", side, price, last_qty + leaves, price,
                  last_qty, 0, leaves, 0, "m", "e", 1)


def test_no_limits_watch_nothing() -> None:
    risk = RiskBook([ACORN], {"S": NO_LIMITS}, {"F": NO_LIMITS}, {"S": "F"})
    assert risk.watched == frozenset() and not risk.collars
    assert risk.check("S", "c1", "ACORN.LAB", BUY, 10**9, 10**9) is None


def test_order_quantity_and_value() -> None:
    risk = book(Limits(max_order_qty=100, max_order_value=money("5000")))
    assert "MaxOrderQty" in (risk.check("S", "a", "ACORN.LAB", BUY, 9000, 101) or "")
    assert "MaxOrderValue" in (risk.check("S", "b", "ACORN.LAB", BUY, 9000, 56) or "")  # 5040
    assert risk.check("S", "c", "ACORN.LAB", BUY, 9000, 55) is None  # 4950
    assert risk.refused == 2


def test_open_value_counts_from_the_check_and_events_give_it_back() -> None:
    risk = book(Limits(max_open_value=money("1000")))
    assert risk.check("S", "a", "ACORN.LAB", BUY, 9000, 10) is None  # 900, before any Accepted
    assert "MaxOpenValue" in (risk.check("S", "b", "ACORN.LAB", SELL, 9000, 2) or "")  # 900 + 180
    risk.on_event(Rejected("S", "a", "ACORN.LAB", BUY, 9000, 10, 3, "no", "e", 1))  # the matcher refused a
    assert risk.exposure("S") == (0, {})
    assert risk.check("S", "b", "ACORN.LAB", SELL, 9000, 10) is None
    risk.on_event(accepted("b", SELL))
    risk.on_event(Rejected("S", "b", "ACORN.LAB", SELL, 9000, 10, 6, "duplicate", "e", 1))  # not this one's
    assert risk.exposure("S")[0] == money("900")
    risk.on_event(filled("b", 4, 6, SELL))
    assert risk.exposure("S") == (money("540"), {"ACORN.LAB": -4})
    risk.on_event(Cancelled("S", "b-c", "b", "o-b", "ACORN.LAB", SELL, 9000, 10, 4, 36000, "", "e", 1))
    assert risk.exposure("S") == (0, {"ACORN.LAB": -4})


def test_an_intake_refusal_and_a_busy_exchange_give_the_room_back() -> None:
    risk = book(Limits(max_open_value=money("1000")))
    assert risk.check("S", "a", "ACORN.LAB", BUY, 9000, 10) is None
    risk.on_event(Refused("S", "35=8\x0137=NONE\x0117=x\x0111=a\x01150=8\x0139=8\x0158=no\x01", 1))
    assert risk.exposure("S")[0] == 0
    assert risk.check("S", "b", "ACORN.LAB", BUY, 9000, 10) is None
    risk.release("S", "b")
    assert risk.exposure("S")[0] == 0


def test_position_is_the_worst_case_of_fills_and_open_orders() -> None:
    risk = book(Limits(max_position=50))
    assert risk.check("S", "a", "ACORN.LAB", BUY, 9000, 30) is None
    risk.on_event(accepted("a", qty=30))
    risk.on_event(filled("a", 30, 0))
    assert risk.exposure("S")[1] == {"ACORN.LAB": 30}
    assert risk.check("S", "b", "ACORN.LAB", BUY, 9000, 20) is None  # 30 + 20
    assert "MaxPosition" in (risk.check("S", "c", "ACORN.LAB", BUY, 9000, 1) or "")  # 30 + 20 + 1
    assert risk.check("S", "d", "ACORN.LAB", SELL, 9000, 80) is None  # 30 - 80 = -50
    assert "MaxPosition" in (risk.check("S", "e", "ACORN.LAB", SELL, 9000, 1) or "")
    assert risk.check("S", "f", "BIRCH.LAB", BUY, 2500, 50) is None  # per instrument


def test_a_replace_moves_the_open_order() -> None:
    risk = book(Limits(max_open_value=money("2000")))
    assert risk.check("S", "a", "ACORN.LAB", BUY, 9000, 10) is None
    risk.on_event(accepted("a"))
    risk.on_event(Replaced("S", "a2", "a", "o-a", "ACORN.LAB", BUY, 9500, 20, 0, 20, 0, "e", 1))
    assert risk.exposure("S")[0] == money("1900")
    assert "MaxOpenValue" in (risk.check("S", "b", "ACORN.LAB", BUY, 9000, 2) or "")
    risk.on_event(Cancelled("S", "a2", "", "o-a", "ACORN.LAB", BUY, 9500, 20, 0, 0, "", "e", 1))
    assert risk.exposure("S")[0] == 0
    assert "MaxOpenValue" not in (risk.check_order("S", "ACORN.LAB", BUY, 9000, 1000) or "")


def test_the_collar_around_the_last_trade() -> None:
    risk = book(Limits(collar_bp=500))
    assert risk.collars
    assert risk.check("S", "a", "ACORN.LAB", BUY, 11000, 1) is None  # no trade yet: no collar
    risk.trade("ACORN.LAB", 10000)
    assert risk.check("S", "b", "ACORN.LAB", BUY, 10500, 1) is None
    problem = risk.check("S", "c", "ACORN.LAB", BUY, 10501, 1) or ""
    assert "PriceCollar" in problem and "5%" in problem and "100" in problem
    assert risk.check("S", "d", "ACORN.LAB", SELL, 10501, 1) is None  # a sell above: fine
    assert "PriceCollar" in (risk.check("S", "e", "ACORN.LAB", SELL, 9499, 1) or "")
    assert "PriceCollar" in (risk.check_order("S", "ACORN.LAB", SELL, 9499, 1) or "")


def test_a_firm_limit_covers_its_sessions_together() -> None:
    risk = RiskBook([ACORN], {}, {"F": Limits(max_open_value=money("1000"))}, {"A": "F", "B": "F"})
    assert risk.watched == {"A", "B"}
    assert risk.check("A", "a", "ACORN.LAB", BUY, 9000, 6) is None  # 540
    problem = risk.check("B", "b", "ACORN.LAB", BUY, 9000, 6) or ""
    assert "MaxOpenValue of the firm F" in problem
    assert risk.check("B", "c", "ACORN.LAB", BUY, 9000, 5) is None  # 540 + 450
    assert risk.exposure("firm:F")[0] == money("990")


@pytest.mark.parametrize(("values", "expected"), [
    ({"MaxOrderQty": "10"}, Limits(max_order_qty=10)),
    ({"MaxOrderValue": "1000.5"}, Limits(max_order_value=1_000_500_000)),
    ({"PriceCollar": "2.5%"}, Limits(collar_bp=250)),
    ({"PriceCollar": "10"}, Limits(collar_bp=1000)),
    ({"MaxOpenValue": "1e3", "MaxPosition": "7"}, Limits(max_open_value=10**9, max_position=7)),
])
def test_limits_read_from_a_section(values: dict[str, str], expected: Limits) -> None:
    left = {**values, "Other": "x"}
    assert parse_limits(left, "here") == expected
    assert left == {"Other": "x"}


@pytest.mark.parametrize("values", [{"MaxOrderQty": "0"}, {"MaxOrderQty": "1.5"}, {"MaxOrderValue": "-1"},
                                    {"PriceCollar": "100%"}, {"PriceCollar": "x"}, {"MaxPosition": ""}])
def test_bad_limits_fail_fast(values: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="here"):
        parse_limits(dict(values), "here")


FILE = """
[FIRM]
Name=ACME
Sessions=CLIENT01, CLIENT02
MaxOpenValue=100000
[SESSION]
TargetCompID=ACME03
Firm=ACME
MaxOrderQty=500
[SESSION]
BeginString=FIX.4.2
TargetCompID=ACME-DC
DropCopyFor=ACME
"""


def test_firms_and_drop_copies_in_the_sessions_file() -> None:
    specs = parse_sessions_text(FILE)
    assert [s.target for s in specs] == ["ACME03", "ACME-DC"]
    assert specs[0].limits == Limits(max_order_qty=500) and specs[0].firm == "ACME"
    assert "Firm" not in specs[0].options and "MaxOrderQty" not in specs[0].options
    firms = parse_firms(FILE)
    assert firms["ACME"].sessions == ("CLIENT01", "CLIENT02")
    assert firms["ACME"].limits == Limits(max_open_value=100000 * MICRO)
    everything = pool_sessions() + specs
    assert firm_of(everything, firms) == {"ACME03": "ACME", "CLIENT01": "ACME", "CLIENT02": "ACME"}
    assert drop_copy_sessions(everything) == {"ACME-DC": "ACME"}


@pytest.mark.parametrize(("text", "match"), [
    ("[FIRM]\nMaxOrderQty=1\n", "Name is required"),
    ("[FIRM]\nName=A\nColour=red\n", "unknown keys Colour"),
    ("[FIRM]\nName=A\n[FIRM]\nName=A\n", "twice"),
    ("[SESSION]\nTargetCompID=X\nDropCopyFor=A\nMaxOrderQty=1\n", "no risk limits"),
])
def test_bad_firms_fail_fast(text: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_sessions_text(text)
        parse_firms(text)


def test_a_member_of_no_known_firm_fails_fast() -> None:
    specs = parse_sessions_text("[SESSION]\nTargetCompID=X\nFirm=NOPE\n")
    with pytest.raises(ConfigError, match="NOPE"):
        firm_of(specs, {})
    with pytest.raises(ConfigError, match="no session GHOST"):
        firm_of(specs, parse_firms("[FIRM]\nName=NOPE\nSessions=GHOST\n"))


def nos_text(session: str, clordid: str, qty: int = 10, price: str = "90.00") -> str:
    return (f"8=FIX.4.4\x019=0\x0135=D\x0149={session}\x0156=FIXLAB\x0134=2\x0111={clordid}\x0155=ACORN.LAB"
            f"\x0154=1\x0160=20260101-00:00:00\x0138={qty}\x0140=2\x0144={price}\x0110=000\x01")


def test_the_guard_passes_every_unwatched_session() -> None:
    inbound = Inbound([ACORN], "gw")
    guard = Guard(inbound, RiskBook([ACORN], {}, {}, {}), lambda: 1)
    assert guard.watched == frozenset()
    assert guard.check("D", nos_text("CLIENT01", "a")) is None


def test_the_guard_refuses_killed_and_drop_copy_sessions() -> None:
    inbound = Inbound([ACORN], "gw")
    guard = Guard(inbound, RiskBook([ACORN], {"R": Limits(max_order_qty=5)}, {}, {}), lambda: 1,
                  drop_copies=["DC"])
    refusal = guard.check("D", nos_text("DC", "a"))
    assert refusal is not None and refusal.text == DROP_COPY_TEXT and "\x0139=8\x01" in refusal.body
    cancel = guard.check("F", nos_text("DC", "a").replace("35=D", "35=F"))
    assert cancel is not None and cancel.body.startswith("35=9\x01")
    assert guard.check("H", nos_text("DC", "a").replace("35=D", "35=H")) is None

    guard.kill("K")
    refusal = guard.check("D", nos_text("K", "k1"))
    assert refusal is not None and refusal.text == KILLED_TEXT and "\x01103=0\x01" in refusal.body
    assert guard.check("F", nos_text("K", "k1").replace("35=D", "35=F")) is None  # cancels still go
    replace = guard.check("G", nos_text("K", "k1").replace("35=D", "35=G"))
    assert replace is not None and replace.body.startswith("35=9\x01")
    guard.unkill("K")
    assert guard.check("D", nos_text("K", "k2")) is None and guard.watched == {"R", "DC"}

    over = guard.check("D", nos_text("R", "r1", qty=6))
    assert over is not None and "\x01103=3\x01" in over.body and "MaxOrderQty" in over.body
    assert guard.check("D", nos_text("R", "r2", qty=5)) is None
    assert guard.check("D", nos_text("R", "r3", qty=0)) is None  # the intake's own refusal says why


def test_a_copy_without_trd_match_id() -> None:
    from services.gateway.dropcopy import copy_fields, without_trd_match_id

    body = "35=8\x0117=E1\x0131=100\x01527=M7\x01880=M7\x01"
    assert without_trd_match_id(body) == "35=8\x0117=E1\x0131=100\x01527=M7\x01"
    assert without_trd_match_id("35=8\x01880=M7\x0160=x\x01") == "35=8\x0160=x\x01"
    assert without_trd_match_id("35=8\x0118800=1\x01") == "35=8\x0118800=1\x01"  # another tag
    assert copy_fields("ACME01", "FIX.4.4") == "128=ACME01\x01797=Y\x01"
    assert copy_fields("ACME01", "FIX.4.2") == "128=ACME01\x01"  # FIX42.xml has no 797


def market_text(session: str, clordid: str, qty: int, stop: str | None = None) -> str:
    terms = f"\x0140=3\x0199={stop}" if stop is not None else "\x0140=1"
    return (f"8=FIX.4.4\x019=0\x0135=D\x0149={session}\x0156=FIXLAB\x0134=2\x0111={clordid}\x0155=ACORN.LAB"
            f"\x0154=1\x0160=20260101-00:00:00\x0138={qty}{terms}\x0110=000\x01")


def test_market_and_stop_orders_meet_the_limits_too() -> None:
    risk = RiskBook([ACORN], {"R": Limits(max_order_qty=50, max_order_value=money("1000"), collar_bp=500)},
                    {}, {})
    guard = Guard(Inbound([ACORN], "gw"), risk, lambda: 1)
    over = guard.check("D", market_text("R", "m1", 51))
    assert over is not None and "MaxOrderQty" in over.text and "\x01103=3\x01" in over.body
    # No trade yet: a market order cannot be valued, and a value limit refuses it.
    unvalued = guard.check("D", market_text("R", "m2", 5))
    assert unvalued is not None and "cannot be valued before the first trade of ACORN.LAB" in unvalued.text
    # A stop order is valued at its StopPx (and the collar, for limit prices, does not apply to it).
    risk.trade("ACORN.LAB", 9000)
    assert guard.check("D", market_text("R", "s1", 10, stop="99.00")) is None  # 990, 10% through
    stop_over = guard.check("D", market_text("R", "s2", 11, stop="99.00"))  # 1089
    assert stop_over is not None and "MaxOrderValue" in stop_over.text
    # After a trade at 90.00 a market order is valued at it: 11 x 90 = 990 passes, 12 x 90 = 1080 not.
    assert guard.check("D", market_text("R", "m3", 11)) is None
    refused = guard.check("D", market_text("R", "m4", 12))
    assert refused is not None and "MaxOrderValue" in refused.text


def test_the_docs_example_sessions_file_reads_as_it_says() -> None:
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "risk-and-dropcopy.md").read_text()
    match = re.search(r"```ini\n(.*?)```", page, re.S)
    assert match is not None
    specs = parse_sessions_text(match.group(1))
    firms = parse_firms(match.group(1))
    assert firm_of(specs, firms) == {"ACME01": "ACME", "ACME02": "ACME"}
    assert drop_copy_sessions(specs) == {"ACMEDC": "ACME", "ACMEDC42": "ACME"}
    assert firms["ACME"].limits == Limits(max_open_value=money("250000"))
    assert specs[0].limits == Limits(max_order_qty=1000, collar_bp=500)
