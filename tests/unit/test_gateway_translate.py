"""FIX <-> bus translation, both ways (services.gateway.inbound and .outbound), from byte literals,
including malformed input."""

from __future__ import annotations

from decimal import Decimal

import pytest

from services.gateway.inbound import Inbound, Refusal, fix_time
from services.gateway.outbound import Outbound
from shared.config import Instrument
from shared.fix.codec import MalformedMessage, split_fields
from shared.schema import (
    Accepted,
    Cancelled,
    CancelOrder,
    CancelRejected,
    Filled,
    NewOrder,
    Rejected,
    Replaced,
    ReplaceOrder,
    SessionEnded,
)

ACORN = Instrument("ACORN.LAB", 10_000, Decimal("0.01"))
BIRCH = Instrument("BIRCH.LAB", 2_500, Decimal("0.01"), shard="b")
TS = 1_767_225_600_123_456_789  # 2026-01-01 00:00:00.123 UTC


def fields(raw: bytes) -> dict[str, str]:
    return split_fields(raw.replace(b"|", b"\x01").decode())


def body(text: str) -> dict[str, str]:
    assert text.endswith("\x01")
    return split_fields(text)


class Translator:
    """Both halves under one name: the tests send an order in and read its reports back."""

    def __init__(self, instruments: list[Instrument], reply_to: str, id_prefix: str,
                 trd_match_sessions: frozenset[str] = frozenset()) -> None:
        inbound = Inbound(instruments, reply_to, id_prefix)
        self.command = inbound.command
        self.refusal = inbound.refusal
        self.report = Outbound(instruments, trd_match_sessions).report


@pytest.fixture
def tr() -> Translator:
    return Translator([ACORN, BIRCH], "gw1", "gw1-x")


NOS = (b"8=FIX.4.4|9=150|35=D|34=7|49=CLIENT01|52=20260101-00:00:00.000|56=FIXLAB|11=o1|38=10|40=2|"
       b"44=100.25|54=1|55=ACORN.LAB|59=1|60=20260101-00:00:00.000|10=123|")


def test_new_order_single_becomes_new_order_in_ticks(tr: Translator) -> None:
    cmd = tr.command("D", fields(NOS), TS)
    assert cmd == NewOrder("CLIENT01", "o1", "ACORN.LAB", 1, 10_025, 10, 1, "gw1", 7, TS)


def test_quantity_written_with_zero_decimals_is_whole(tr: Translator) -> None:
    cmd = tr.command("D", fields(NOS.replace(b"38=10|", b"38=10.00|")), TS)
    assert isinstance(cmd, NewOrder) and cmd.qty == 10


def test_tif_defaults_to_day(tr: Translator) -> None:
    cmd = tr.command("D", fields(NOS.replace(b"59=1|", b"")), TS)
    assert isinstance(cmd, NewOrder) and cmd.tif == 0


@pytest.mark.parametrize(("old", "new", "reason", "text"), [
    (b"44=100.25|", b"44=100.255|", "99", "not a whole number of ticks of 0.01"),
    (b"44=100.25|", b"44=-1|", "99", "must be positive"),
    (b"44=100.25|", b"44=abc|", "99", "not a decimal"),
    (b"44=100.25|", b"", "99", "needs a Price (44)"),
    (b"40=2|", b"40=P|", "99", "OrdType 40=P is not accepted: use 1 (Market), 2 (Limit), 3 (Stop)"),
    (b"40=2|", b"40=1|", "99", "no meaning on a market order"),
    (b"40=2|", b"40=3|", "99", "no meaning on a stop order"),
    (b"40=2|", b"40=4|", "99", "a stop order (40=4) needs a StopPx (99)"),
    (b"40=2|", b"40=4|99=100.001|", "99", "StopPx 99=100.001 is not a whole number of ticks"),
    (b"40=2|44=100.25|", b"40=4|99=100.00|", "99", "a stop-limit order (40=4) needs a Price (44)"),
    (b"59=1|", b"59=5|", "99", "TimeInForce 59=5 is not supported"),
    (b"59=1|", b"59=6|", "99", "2 (At the Opening), 3 (IOC), 4 (FOK) or 7 (At the Close)"),
    (b"55=ACORN.LAB|", b"55=NOPE|", "1", "unknown symbol 'NOPE'"),
    (b"54=1|", b"54=5|", "99", "Side 54=5 is not supported"),
    (b"38=10|", b"38=-5|", "13", "OrderQty 38=-5"),
    (b"38=10|", b"38=1.5|", "13", "OrderQty 38=1.5"),
    (b"38=10|", b"38=0|", "13", "OrderQty 38=0"),
    (b"38=10|", b"", "13", "OrderQty (38) is required"),
])
def test_each_bad_order_is_refused_with_a_rejected_execution_report(
        tr: Translator, old: bytes, new: bytes, reason: str, text: str) -> None:
    raw = NOS.replace(old, new)
    assert raw != NOS
    out = tr.command("D", fields(raw), TS)
    assert isinstance(out, Refusal)
    assert out.session == "CLIENT01"
    er = body(out.body)
    assert er["35"] == "8" and er["150"] == "8" and er["39"] == "8"
    assert er["103"] == reason and text in er["58"]
    assert er["11"] == "o1" and er["37"] == "NONE" and er["151"] == "0" and er["14"] == "0"
    assert er["6"] == "0" and er["60"] == "20260101-00:00:00.123" and er["17"].startswith("gw1-x-")


def test_refusals_get_distinct_exec_ids(tr: Translator) -> None:
    bad = fields(NOS.replace(b"40=2|", b"40=1|"))
    a, b = tr.command("D", bad, TS), tr.command("D", bad, TS)
    assert isinstance(a, Refusal) and isinstance(b, Refusal)
    assert body(a.body)["17"] != body(b.body)["17"]


CXL = b"35=F|34=9|49=CLIENT02|56=FIXLAB|11=c1|41=o1|54=2|55=BIRCH.LAB|60=20260101-00:00:00|"


def test_cancel_request_becomes_cancel_order(tr: Translator) -> None:
    expected = CancelOrder("CLIENT02", "c1", "o1", "BIRCH.LAB", 2, "gw1", 9, TS)
    assert tr.command("F", fields(CXL), TS) == expected


def test_cancel_of_unknown_symbol_is_an_order_cancel_reject(tr: Translator) -> None:
    out = tr.command("F", fields(CXL.replace(b"BIRCH.LAB", b"ELM.LAB")), TS)
    assert isinstance(out, Refusal)
    rej = body(out.body)
    assert rej["35"] == "9" and rej["434"] == "1" and rej["102"] == "1" and rej["41"] == "o1"
    assert rej["11"] == "c1" and rej["39"] == "8" and "ELM.LAB" in rej["58"]


RPL = b"35=G|34=4|49=CLIENT03|56=FIXLAB|11=r1|41=o1|54=1|55=ACORN.LAB|38=5|40=2|44=99.5|60=20260101-00:00:00|"


def test_replace_request_becomes_replace_order(tr: Translator) -> None:
    assert tr.command("G", fields(RPL), TS) == ReplaceOrder("CLIENT03", "r1", "o1", "ACORN.LAB", 1, 9_950, 5,
                                                            "gw1", 4, TS)


def test_bad_replace_is_an_order_cancel_reject_for_a_replace(tr: Translator) -> None:
    out = tr.command("G", fields(RPL.replace(b"44=99.5|", b"44=99.505|")), TS)
    assert isinstance(out, Refusal)
    rej = body(out.body)
    assert rej["35"] == "9" and rej["434"] == "2" and rej["102"] == "99" and "ticks" in rej["58"]


def test_other_message_types_are_not_translated(tr: Translator) -> None:
    with pytest.raises(ValueError, match="not an order message"):
        tr.command("AF", fields(NOS), TS)  # OrderMassStatusRequest: H is handled now


@pytest.mark.parametrize("raw", [b"8=FIX.4.4|garbage|", b"=x|", b"abc=1|", b"35D|"])
def test_malformed_text_raises(raw: bytes) -> None:
    with pytest.raises(MalformedMessage):
        fields(raw)


def test_repeated_tag_keeps_last_value_and_empty_fields_are_skipped() -> None:
    assert fields(b"11=a||11=b|") == {"11": "b"}


def test_busy_refusal_for_each_message_type(tr: Translator) -> None:
    assert body(tr.refusal("D", fields(NOS), "busy", TS).body)["150"] == "8"
    assert body(tr.refusal("F", fields(CXL), "busy", TS).body)["434"] == "1"
    assert body(tr.refusal("G", fields(RPL), "busy", TS).body)["434"] == "2"


# ------------------------------------------------------------------------------------------ events

def test_accepted_is_execution_report_new(tr: Translator) -> None:
    er = body(tr.report(Accepted("CLIENT01", "o1", "O-1", "ACORN.LAB", 1, 10_025, 10, 1, "E-1", TS)))
    assert er == {"35": "8", "37": "O-1", "17": "E-1", "11": "o1", "150": "0", "39": "0",
                  "55": "ACORN.LAB", "54": "1", "38": "10", "40": "2", "44": "100.25", "59": "1",
                  "151": "10", "14": "0", "6": "0", "60": "20260101-00:00:00.123"}


def test_partial_and_full_fills(tr: Translator) -> None:
    part = body(tr.report(Filled("S", "o1", "O-1", "ACORN.LAB", 2, 10_000, 10, 9_990, 4, 4, 6, 39_960,
                                 "M-7", "E-2", TS)))
    assert (part["150"], part["39"], part["31"], part["32"], part["527"]) == ("F", "1", "99.90", "4", "M-7")
    assert "880" not in part  # stock FIX 4.4 does not list TrdMatchID in ExecutionReport
    assert (part["151"], part["14"], part["6"], part["44"]) == ("6", "4", "99.90", "100.00")
    full = body(tr.report(Filled("S", "o1", "O-1", "ACORN.LAB", 2, 10_000, 10, 10_000, 6, 10, 0, 99_960,
                                 "M-8", "E-3", TS)))
    assert (full["39"], full["151"], full["14"], full["6"]) == ("2", "0", "10", "99.96")


def test_trd_match_id_goes_only_to_the_sessions_that_ask_for_it() -> None:
    tr = Translator([ACORN, BIRCH], "gw1", "gw1-x", frozenset({"LAB001"}))
    for session, wants in (("LAB001", True), ("CLIENT01", False)):
        er = body(tr.report(Filled(session, "o1", "O-1", "ACORN.LAB", 2, 10_000, 10, 9_990, 4, 4, 6, 39_960,
                                   "M-7", "E-2", TS)))
        assert er["527"] == "M-7"
        assert er.get("880") == ("M-7" if wants else None)


def test_avg_px_that_is_not_a_whole_tick_is_exact_decimal(tr: Translator) -> None:
    # 1 @ 100.00 + 2 @ 100.01 = 300.02 / 3 = 100.00666...: no float drift, 10 places.
    ev = Filled("S", "o1", "O", "ACORN.LAB", 1, 10_001, 3, 10_001, 2, 3, 0, 30_002, "M", "E", TS)
    er = body(tr.report(ev))
    assert er["6"] == "100.0066666667"


def test_cancelled_replaced_rejected(tr: Translator) -> None:
    c = body(tr.report(Cancelled("S", "c1", "o1", "O-1", "ACORN.LAB", 1, 10_000, 10, 4, 40_000, "", "E", TS)))
    assert (c["150"], c["39"], c["41"], c["151"], c["14"], c["6"]) == ("4", "4", "o1", "0", "4", "100.00")
    assert "58" not in c
    r = body(tr.report(Replaced("S", "r1", "o1", "O-1", "ACORN.LAB", 1, 9_900, 8, 0, 8, 0, "E", TS)))
    assert (r["150"], r["39"], r["41"], r["44"], r["38"], r["151"]) == ("5", "0", "o1", "99.00", "8", "8")
    j = body(tr.report(Rejected("S", "o9", "ACORN.LAB", 1, 50_000, 10, 3, "price outside the band", "E", TS)))
    assert (j["150"], j["39"], j["103"], j["37"]) == ("8", "8", "3", "NONE")
    assert j["58"] == "price outside the band"


def test_cancel_rejected_is_order_cancel_reject(tr: Translator) -> None:
    out = body(tr.report(CancelRejected("S", "c2", "o1", "O-1", 1, 0, 2, "order is filled", TS)))
    assert out == {"35": "9", "37": "O-1", "11": "c2", "41": "o1", "39": "2", "434": "1", "102": "0",
                   "60": "20260101-00:00:00.123", "58": "order is filled"}


def test_text_with_soh_cannot_break_the_message(tr: Translator) -> None:
    out = body(tr.report(Rejected("S", "o9", "ACORN.LAB", 1, 1, 1, 99, "bad\x01ty=pe", "E", TS)))
    assert out["58"] == "bad ty=pe"


def test_a_command_is_not_an_event(tr: Translator) -> None:
    with pytest.raises(TypeError):
        tr.report(SessionEnded("S", "gw1", TS))


def test_fix_time() -> None:
    assert fix_time(TS) == "20260101-00:00:00.123"
