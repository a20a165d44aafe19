"""The gateway's side of issue 31's orders: market (40=1), stop (40=3) and stop-limit (40=4) with StopPx
(99), At the Opening (59=2) and At the Close (59=7) in; their reports out, with 40/99 echoed and a
triggered stop told as each version can say it; every body valid for a strict stock dictionary of
each version (QuickFIX's own validation, the one a stock client runs)."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import quickfix as fix

from services.gateway.dialects import Dialect
from services.gateway.inbound import Inbound, Refusal
from services.gateway.outbound import Outbound
from services.gateway.server import VersionDictionaries
from shared.fix.dictionary import load, write_exchange_dictionary
from shared.fix.versions import VERSIONS, installed
from shared.schema import (
    AT_CLOSE,
    AT_OPEN,
    BUY,
    DAY,
    ORD_LIMIT,
    ORD_MARKET,
    ORD_STOP,
    ORD_STOP_LIMIT,
    SELL,
    Accepted,
    Cancelled,
    Filled,
    NewOrder,
    Rejected,
    Replaced,
    StatusReport,
    Triggered,
)
from tests.unit.test_gateway_translate import ACORN, BIRCH, NOS, TS, body, fields

SOH = "\x01"


def nos(old: bytes, new: bytes) -> dict[str, str]:
    raw = NOS.replace(old, new)
    assert raw != NOS
    return fields(raw)


@pytest.fixture
def inbound() -> Inbound:
    return Inbound([ACORN, BIRCH], "gw1", "x")


@pytest.fixture
def outbound() -> Outbound:
    return Outbound([ACORN, BIRCH])


def test_a_market_order_has_no_price(inbound: Inbound) -> None:
    cmd = inbound.command("D", nos(b"40=2|44=100.25|", b"40=1|"), TS)
    assert cmd == NewOrder("CLIENT01", "o1", "ACORN.LAB", BUY, 0, 10, 1, "gw1", 7, TS, 0, ORD_MARKET, 0)


def test_a_stop_carries_its_stop_price_in_ticks(inbound: Inbound) -> None:
    cmd = inbound.command("D", nos(b"40=2|44=100.25|", b"40=3|99=98.50|"), TS)
    assert isinstance(cmd, NewOrder)
    assert (cmd.ord_type, cmd.price, cmd.stop_px) == (ORD_STOP, 0, 9_850)


def test_a_stop_limit_carries_both_prices(inbound: Inbound) -> None:
    cmd = inbound.command("D", nos(b"40=2|", b"40=4|99=101.00|"), TS)
    assert isinstance(cmd, NewOrder)
    assert (cmd.ord_type, cmd.price, cmd.stop_px) == (ORD_STOP_LIMIT, 10_025, 10_100)


@pytest.mark.parametrize(("raw", "tif"), [(b"59=2|", AT_OPEN), (b"59=7|", AT_CLOSE)])
def test_at_the_opening_and_at_the_close_both_ways_in(inbound: Inbound, raw: bytes, tif: int) -> None:
    cmd = inbound.command("D", nos(b"59=1|", raw), TS)
    assert isinstance(cmd, NewOrder) and cmd.tif == tif
    # The fast path (a limit order) reads the same.
    text = NOS.replace(b"59=1|", raw).replace(b"|", b"\x01").decode()
    assert inbound.new_order(text, TS) == cmd


def test_a_non_limit_order_takes_the_general_path(inbound: Inbound) -> None:
    text = NOS.replace(b"40=2|44=100.25|", b"40=1|").replace(b"|", b"\x01").decode()
    assert inbound.new_order(text, TS) is None


def test_a_stop_without_stop_px_is_a_rejected_report_echoing_the_order(inbound: Inbound) -> None:
    out = inbound.command("D", nos(b"40=2|44=100.25|", b"40=3|"), TS)
    assert isinstance(out, Refusal)
    er = body(out.body)
    assert (er["35"], er["150"], er["39"], er["40"]) == ("8", "8", "8", "3")
    assert "needs a StopPx (99)" in er["58"]
    out = inbound.command("D", nos(b"40=2|44=100.25|", b"40=3|99=-1|"), TS)
    assert isinstance(out, Refusal) and body(out.body)["99"] == "-1"
    assert "StopPx 99=-1 must be positive" in body(out.body)["58"]


def test_a_replace_still_amends_limit_orders_only(inbound: Inbound) -> None:
    rpl = fields(b"35=G|34=8|49=CLIENT01|56=FIXLAB|11=o2|41=o1|38=10|40=3|99=98.00|54=1|55=ACORN.LAB|"
                 b"60=20260101-00:00:00|")
    out = inbound.command("G", rpl, TS)
    assert isinstance(out, Refusal) and body(out.body)["35"] == "9"
    assert "only limit orders (40=2) are amended" in out.text


def events() -> list[object]:
    """One event of each kind for a stop (sell 10 ACORN.LAB, StopPx 98.50) and a market order."""
    return [
        Accepted("C1", "s1", "O1", "ACORN.LAB", SELL, 0, 10, DAY, "E1", TS, ORD_STOP, 9_850),
        Triggered("C1", "s1", "O1", "ACORN.LAB", SELL, 0, 10, ORD_STOP, 9_850, "E2", TS),
        Filled("C1", "s1", "O1", "ACORN.LAB", SELL, 0, 10, 9_840, 4, 4, 6, 39_360, "M1", "E3", TS,
               ORD_STOP, 9_850),
        Cancelled("C1", "s1", "s1", "O1", "ACORN.LAB", SELL, 0, 10, 4, 39_360,
                  "no liquidity within the protection band", "E4", TS, ORD_STOP, 9_850),
        Rejected("C1", "m1", "ACORN.LAB", BUY, 0, 5, 2, "a market order cannot trade while CLOSED", "E5", TS,
                 ORD_MARKET, 0),
        Replaced("C1", "l2", "l1", "O2", "ACORN.LAB", BUY, 10_100, 5, 0, 5, 0, "E6", TS,
                 ORD_STOP_LIMIT, 10_150),
        StatusReport("C1", "s1", "O1", "ACORN.LAB", SELL, 0, 10, 0, 10, 0, 0, "", "", "0", TS,
                     ORD_STOP, 9_850),
        Accepted("C1", "a1", "O3", "ACORN.LAB", BUY, 10_000, 5, AT_OPEN, "E7", TS),
    ]


def test_reports_echo_ord_type_and_stop_px_and_leave_out_a_price_there_is_not(outbound: Outbound) -> None:
    reports = [body(outbound.report(e)) for e in events()]  # type: ignore[arg-type]
    new, trig, fill, cxl, rej, rpl, status, opg = reports
    for er in (new, trig, fill, cxl, status):
        assert (er["40"], er["99"]) == ("3", "98.50") and "44" not in er
    assert (rej["40"], "44" in rej, "99" in rej) == ("1", False, False)
    assert (rpl["40"], rpl["44"], rpl["99"]) == ("4", "101.00", "101.50")
    assert (opg["40"], opg["44"], opg["59"], "99" in opg) == ("2", "100.00", "2", False)
    # A triggered stop: Restated (D) in the exchange's FIX 4.4, still New, with the reason.
    assert (trig["150"], trig["39"], trig["151"], trig["14"]) == ("D", "0", "10", "0")
    assert "triggered" in trig["58"] and "98.50" in trig["58"]
    assert fill["31"] == "98.40" and cxl["58"] == "no liquidity within the protection band"


def test_a_limit_orders_reports_are_as_before(outbound: Outbound) -> None:
    ev = Accepted("C1", "o1", "O1", "ACORN.LAB", BUY, 10_025, 10, DAY, "E1", TS)
    assert "\x0140=2\x0144=100.25\x0159=0\x01" in outbound.report(ev)


@pytest.fixture(scope="module")
def dialect(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Dialect]:
    base = tmp_path_factory.mktemp("dialects")
    fix44 = load(str(write_exchange_dictionary(base / "FIXLAB-FIX44.xml")))
    out = {}
    for name in ("4.2", "5.0SP2"):
        vd = VersionDictionaries(VERSIONS[name], base, fix44, trim=True)
        assert vd.parsed is not None
        out[name] = Dialect(vd.version, vd.parsed)
    return out


def test_a_triggered_stop_is_l_in_50sp2_and_restated_in_42(dialect: dict[str, Dialect],
                                                           outbound: Outbound) -> None:
    trig = outbound.report(events()[1])  # type: ignore[arg-type]
    sp2 = body(dialect["5.0SP2"](trig))
    assert (sp2["150"], sp2["39"], sp2["99"]) == ("L", "0", "98.50")
    v42 = body(dialect["4.2"](trig))
    assert (v42["150"], v42["20"], v42["39"], v42["40"], v42["99"]) == ("D", "0", "0", "3", "98.50")
    # Nothing else changes in 5.0 SP2's reports.
    new = outbound.report(events()[0])  # type: ignore[arg-type]
    assert dialect["5.0SP2"](new) == new


def _validate(version: str, text: str) -> None:
    """QuickFIX's own validation of a whole message with the installed (stock) dictionaries."""
    v = VERSIONS[version]
    header = (f"8={v.begin_string}{SOH}9=0{SOH}{text[:text.find(SOH) + 1]}49=FIXLAB{SOH}56=CLIENT{SOH}"
              f"34=2{SOH}52=20260101-00:00:00{SOH}")
    whole = header + text[text.find(SOH) + 1:] + f"10=000{SOH}"
    msg = fix.Message(fix.Message(whole, False).toString(), False)
    fix.DataDictionary.validate(msg, _stock(v.transport_file or v.app_file), _stock(v.app_file))


@functools.cache
def _stock(file: str) -> fix.DataDictionary:
    """An installed dictionary, read once per run: QuickFIX reads FIX50SP2.xml in ~0.3 s, and these
    tests validate dozens of messages (validate() only reads it)."""
    return fix.DataDictionary(str(installed(file)))


@pytest.mark.parametrize("version", ["4.2", "4.4", "5.0SP2"])
def test_a_strict_stock_dictionary_of_each_version_takes_every_new_report(
        version: str, dialect: dict[str, Dialect], outbound: Outbound, tmp_path: Path) -> None:
    say = dialect.get(version, lambda b: b)
    for ev in events():
        _validate(version, say(outbound.report(ev)))  # type: ignore[arg-type,operator]
    stop = fields(NOS.replace(b"40=2|44=100.25|", b"40=3|"))
    refusal = Inbound([ACORN], "gw1", "x").command("D", stop, TS)
    assert isinstance(refusal, Refusal)
    _validate(version, say(refusal.body))  # type: ignore[operator]
    bad = fix.Message(fix.Message(
        f"8=FIX.4.4{SOH}9=0{SOH}35=8{SOH}49=A{SOH}56=B{SOH}34=2{SOH}52=20260101-00:00:00{SOH}37=O{SOH}17=E{SOH}"
        f"11=c{SOH}150=L{SOH}39=0{SOH}55=X{SOH}54=1{SOH}151=1{SOH}14=0{SOH}6=0{SOH}10=000{SOH}", False
    ).toString(), False)
    with pytest.raises(fix.IncorrectTagValue):  # the check can fail: FIX 4.4's has no ExecType L
        fix.DataDictionary.validate(bad, fix.DataDictionary(str(installed("FIX44.xml"))),
                                    fix.DataDictionary(str(installed("FIX44.xml"))))
    assert ORD_LIMIT == 2  # the FIX value, echoed as it is
